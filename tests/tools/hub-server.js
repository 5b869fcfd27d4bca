#!/usr/bin/env node
// A fake Hugging Face Hub for the hub tests, on 127.0.0.1 only.
//
//   node tests/tools/hub-server.js --root DIR --port-file F [--log F] [--token T]
//        [--truncate-once FILE] [--corrupt FILE] [--no-range]
//        [--rename OLD_OWNER/OLD_REPO=OWNER/REPO] [--cdn-host HOST] [--time-limit SECONDS]
//
// DIR/<owner>/<repo>/<files> are the repos. Served like the Hub:
//   GET  /api/models/<owner>/<repo>/revision/<rev>   {"id", "sha", "siblings": [{"rfilename"}]}
//   HEAD|GET /<owner>/<repo>/resolve/<rev>/<file>
//       small files: 200 with ETag W/"<git blob sha1>" and X-Repo-Commit
//       LFS files (*.safetensors, *.gguf, *.bin): 302 to /cdn/<sha256>?signature=... with
//       X-Linked-Etag "<sha256>", X-Linked-Size and X-Repo-Commit
//   HEAD|GET /cdn/<sha256>                           the bytes, never asks for a token
// <rev> is "main" or the commit: a sha1 over the repo's names and contents.
// Range requests get 206 (unless --no-range). --token T: the API and resolve
// URLs answer 401 without "Authorization: Bearer T". --truncate-once FILE:
// the first GET of FILE's bytes announces the full length, sends half and
// drops the connection. --corrupt FILE: FILE's bytes are served with one
// byte flipped. --rename: the old repo id answers 307 with a relative
// Location to the new one (a renamed repo). --cdn-host: the host name in
// the LFS redirects (default 127.0.0.1; "localhost" makes the CDN another
// origin, which must not get the token). Every request is appended to
// the --log file as one JSON line before it is answered. The server exits
// by itself after --time-limit seconds (default 120) so a test can never
// hang.
'use strict';
const http = require('http');
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');

function parseArgs(argv) {
  const opts = { timeLimit: 120, noRange: false, cdnHost: '127.0.0.1' };
  const valued = {
    '--root': 'root', '--port-file': 'portFile', '--log': 'log', '--token': 'token',
    '--truncate-once': 'truncateOnce', '--corrupt': 'corrupt', '--rename': 'rename',
    '--time-limit': 'timeLimit', '--cdn-host': 'cdnHost',
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--no-range') { opts.noRange = true; continue; }
    if (!(a in valued) || i + 1 >= argv.length) {
      process.stderr.write(`hub-server: bad argument ${a}\n`);
      process.exit(2);
    }
    opts[valued[a]] = argv[++i];
  }
  if (!opts.root || !opts.portFile) {
    process.stderr.write('hub-server: --root and --port-file are required\n');
    process.exit(2);
  }
  opts.timeLimit = Number(opts.timeLimit);
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
let truncated = false;
const cdn = new Map(); // sha256 -> { repoDir, name }
const renames = new Map();
if (opts.rename) {
  const [from, to] = opts.rename.split('=');
  renames.set(from, to);
}

function isLfs(name) {
  return /\.(safetensors|gguf|bin)$/.test(name);
}

function listFiles(dir, prefix = '') {
  let out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    if (e.isDirectory()) out = out.concat(listFiles(path.join(dir, e.name), rel));
    else if (e.isFile()) out.push(rel);
  }
  return out.sort();
}

function sha256(buf) { return crypto.createHash('sha256').update(buf).digest('hex'); }

function gitBlobSha1(buf) {
  return crypto.createHash('sha1').update(`blob ${buf.length}\0`).update(buf).digest('hex');
}

function repoDir(owner, repo) {
  const safe = /^[A-Za-z0-9._-]+$/;
  if (!safe.test(owner) || !safe.test(repo) || owner.startsWith('.') || repo.startsWith('.')) return null;
  const dir = path.join(opts.root, owner, repo);
  return fs.existsSync(dir) && fs.statSync(dir).isDirectory() ? dir : null;
}

function commitOf(dir) {
  const h = crypto.createHash('sha1');
  for (const f of listFiles(dir)) h.update(`${f}\0${sha256(fs.readFileSync(path.join(dir, f)))}\n`);
  return h.digest('hex');
}

function logRequest(req) {
  if (!opts.log) return;
  const line = JSON.stringify({
    method: req.method,
    url: req.url,
    range: req.headers.range || null,
    auth: req.headers.authorization || null,
  });
  fs.appendFileSync(opts.log, line + '\n');
}

function fail(res, status, code, message) {
  res.writeHead(status, {
    'Content-Type': 'application/json',
    'X-Error-Code': code,
    'X-Error-Message': message,
  });
  res.end(JSON.stringify({ error: message }));
}

function authorized(req, res) {
  if (!opts.token || req.headers.authorization === `Bearer ${opts.token}`) return true;
  fail(res, 401, 'RepoNotFound', 'Invalid credentials in Authorization header');
  return false;
}

// Sends the bytes of `name`, honouring Range, --truncate-once and --corrupt.
function sendBytes(req, res, name, data, headers) {
  if (name === opts.corrupt && data.length > 0) {
    data = Buffer.from(data);
    data[data.length >> 1] ^= 0xff;
  }
  let status = 200;
  let body = data;
  const range = req.headers.range;
  const m = range && !opts.noRange ? /^bytes=(\d+)-(\d*)$/.exec(range) : null;
  if (m) {
    const start = Number(m[1]);
    const end = m[2] ? Math.min(Number(m[2]), data.length - 1) : data.length - 1;
    if (start >= data.length) {
      res.writeHead(416, { 'Content-Range': `bytes */${data.length}` });
      res.end();
      return;
    }
    status = 206;
    body = data.subarray(start, end + 1);
    headers['Content-Range'] = `bytes ${start}-${end}/${data.length}`;
  }
  headers['Content-Length'] = String(body.length);
  headers['Accept-Ranges'] = 'bytes';
  res.writeHead(status, headers);
  if (req.method === 'HEAD') {
    res.end();
    return;
  }
  if (name === opts.truncateOnce && !truncated && body.length > 1) {
    truncated = true;
    res.write(body.subarray(0, body.length >> 1), () => res.socket.destroy());
    return;
  }
  res.end(body);
}

function handle(req, res) {
  logRequest(req);
  const url = new URL(req.url, 'http://127.0.0.1');
  const parts = url.pathname.split('/').slice(1).map(decodeURIComponent);

  if (parts[0] === 'cdn' && parts.length === 2) {
    const entry = cdn.get(parts[1]);
    if (!entry) return fail(res, 404, 'EntryNotFound', 'no such blob');
    const data = fs.readFileSync(path.join(entry.repoDir, entry.name));
    return sendBytes(req, res, entry.name, data, { ETag: `"${parts[1]}"` });
  }

  const isApi = parts[0] === 'api' && parts[1] === 'models' && parts[4] === 'revision' &&
                parts.length === 6;
  const isResolve = parts.length >= 5 && parts[2] === 'resolve';
  if (!isApi && !isResolve) return fail(res, 404, 'NotFound', 'unknown route');
  const [owner, repo] = isApi ? [parts[2], parts[3]] : [parts[0], parts[1]];
  const renamed = renames.get(`${owner}/${repo}`);
  if (renamed) {
    const [no, nr] = renamed.split('/');
    const loc = isApi
      ? `/api/models/${no}/${nr}/revision/${parts[5]}`
      : `/${no}/${nr}/${url.pathname.split('/').slice(3).join('/')}`;
    res.writeHead(307, { Location: loc });
    return res.end();
  }
  if (!authorized(req, res)) return;
  const dir = repoDir(owner, repo);
  if (!dir) return fail(res, 404, 'RepoNotFound', `Repository ${owner}/${repo} not found`);
  const commit = commitOf(dir);
  const rev = isApi ? parts[5] : parts[3];
  if (rev !== 'main' && rev !== commit) {
    return fail(res, 404, 'RevisionNotFound', `Invalid rev id: ${rev}`);
  }

  if (isApi) {
    if (req.method !== 'GET') return fail(res, 405, 'MethodNotAllowed', 'GET only');
    const body = JSON.stringify({
      id: `${owner}/${repo}`,
      sha: commit,
      siblings: listFiles(dir).map((f) => ({ rfilename: f })),
    });
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
    return res.end(body);
  }

  const name = parts.slice(4).join('/');
  if (name.split('/').some((c) => c === '' || c === '.' || c === '..')) {
    return fail(res, 400, 'BadRequest', 'bad file name');
  }
  const file = path.join(dir, name);
  if (!fs.existsSync(file) || !fs.statSync(file).isFile()) {
    res.setHeader('X-Repo-Commit', commit);
    return fail(res, 404, 'EntryNotFound', `Entry not found: ${name}`);
  }
  const data = fs.readFileSync(file);
  if (isLfs(name)) {
    const sha = sha256(data);
    cdn.set(sha, { repoDir: dir, name });
    const port = server.address().port;
    res.writeHead(302, {
      // A long query like a signed CDN URL's, so clients must not cut headers.
      Location: `http://${opts.cdnHost}:${port}/cdn/${sha}?signature=${'s'.repeat(3000)}`,
      'X-Repo-Commit': commit,
      'X-Linked-Etag': `"${sha}"`,
      'X-Linked-Size': String(data.length),
      ETag: `"${gitBlobSha1(Buffer.from(`pointer ${sha}`))}"`,
      'Content-Length': '0',
    });
    return res.end();
  }
  return sendBytes(req, res, name, data, {
    'X-Repo-Commit': commit,
    ETag: `W/"${gitBlobSha1(data)}"`,
  });
}

const server = http.createServer((req, res) => {
  try {
    handle(req, res);
  } catch (e) {
    process.stderr.write(`hub-server: ${e.stack}\n`);
    if (!res.headersSent) fail(res, 500, 'InternalError', String(e.message));
    else res.destroy();
  }
});

server.listen(0, '127.0.0.1', () => {
  const tmp = `${opts.portFile}.tmp`;
  fs.writeFileSync(tmp, String(server.address().port));
  fs.renameSync(tmp, opts.portFile); // the test never reads half a port
});
setTimeout(() => process.exit(0), opts.timeLimit * 1000);
process.on('SIGTERM', () => process.exit(0));
