# Claude Code and Codex end to end against memra-serve (tests/agents/run.sh:
# installs the pinned agents when missing, SKIP when npm cannot).
bash tests/agents/run.sh
