# memra-serve driven by the official openai npm SDK (tests/interop, pinned):
# completions on stories260K, chat on memra-tiny and on a random-weight
# model carrying the real Qwen3 tokenizer and chat template; blocking and
# streamed with include_usage; the replies compared with memra-gen's.
source tests/integration/serve_common.bash
if [ ! -d tests/interop/node_modules/openai ]; then
  fail "openai SDK installed" "tests/interop/node_modules/openai is missing (scripts/deps.sh runs npm ci)"
  exit 0
fi
make_qwen_tiny

# What memra-gen says greedily, for the SDK script to compare with.
ctext=$(memra-gen "$STORIES" -p 'Once upon a time' -n 24 --temp 0 --json 2>/dev/null | jq .text)
chat_text=$(memra-gen models/memra-tiny.gguf --chat --system 'Be brief.' -p 'Tell me about the whale' -n 20 --temp 0 --json 2>/dev/null | jq .text)
cat >"$T/expect.json" <<EOF
{"completion": {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 24, "text": $ctext},
 "chat": [{"model": "chat", "content": "Tell me about the whale", "max_tokens": 20, "text": $chat_text},
          {"model": "qwen", "content": "hi", "max_tokens": 8, "text": null}]}
EOF

start_server sdk -m "tiny=$STORIES" -m chat=models/memra-tiny.gguf -m "qwen=$QWEN" --api-key sdk-key -t 1
(cd tests/interop && timeout 60 node openai-client.mjs "$URL" sdk-key "$T/expect.json")
rc=$?
[ $rc -eq 0 ] && pass "openai SDK script exits 0" || fail "openai SDK script exits 0" "exit $rc"
stop_server "$PID" >/dev/null
