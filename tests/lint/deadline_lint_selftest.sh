#!/usr/bin/env bash
# The deadline lint must fail on a bare ClientContext and pass on a clean tree.
set -euo pipefail
lint="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/services/x" "$tmp/common/grpc"
printf 'void F() {\n  auto ctx = cairn::NewClientContext(absl::Seconds(1));\n}\n' > "$tmp/services/x/ok.cc"
bash "$lint" "$tmp" >/dev/null
printf 'void G() {\n  grpc::ClientContext ctx;\n}\n' > "$tmp/services/x/bad.cc"
if bash "$lint" "$tmp" >/dev/null; then
  echo "lint accepted a bare ClientContext"
  exit 1
fi
echo ok
