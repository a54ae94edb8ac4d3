#!/usr/bin/env bash
# RPC1 (docs/reliability.md): every gRPC client call carries a deadline. Contexts are made
# only by cairn::NewClientContext (common/grpc/client.cc), which always sets one; this lint
# fails on any other construction of a grpc::ClientContext in first-party code.
#
#   tools/lint/check_deadlines.sh [REPO_ROOT]
set -euo pipefail
root="${1:-$(dirname "$0")/../..}"
cd "$root"
pattern='(grpc::)?ClientContext[[:space:]]+[A-Za-z_][A-Za-z0-9_]*[[:space:]]*[;({]|make_unique<(grpc::)?ClientContext>|new[[:space:]]+(grpc::)?ClientContext'
hits=$(grep -rnE "$pattern" --include='*.cc' --include='*.h' common services tools tests 2>/dev/null \
         | grep -v '^common/grpc/client\.cc:' \
         | grep -v '^tests/lint/' || true)
if [[ -n "$hits" ]]; then
  echo "check_deadlines: grpc::ClientContext made without cairn::NewClientContext (RPC1):"
  echo "$hits"
  exit 1
fi
echo "check_deadlines: ok"
