// A loopback HTTP proxy that forwards every request to memra-serve and
// writes what passed, so an agent test can check what the agent asked and
// what it was answered (tests/agents/*.sh).
//
//   node capture-proxy.mjs TARGET-URL DIR   (prints "listening PORT" once up)
//
// DIR/N.req.json: {method, url, headers, body} of request N;
// DIR/N.res.txt: its status line, then the response body as sent.
import fs from "node:fs";
import http from "node:http";

const [target, dir] = process.argv.slice(2);
let n = 0;
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const i = n++, body = Buffer.concat(chunks);
    fs.writeFileSync(`${dir}/${i}.req.json`, JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body: body.toString() }));
    const up = http.request(new URL(req.url, target), { method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      const out = [];
      r.on("data", (c) => { out.push(c); res.write(c); });
      r.on("end", () => {
        fs.writeFileSync(`${dir}/${i}.res.txt`, `${r.statusCode}\n${Buffer.concat(out)}`);
        res.end();
      });
    });
    up.on("error", (e) => { res.writeHead(502); res.end(String(e)); });
    up.end(body);
  });
});
server.listen(0, "127.0.0.1", () => console.log(`listening ${server.address().port}`));
