#!/usr/bin/env bash
# gofmt, go vet and staticcheck over the main module and infra/.
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '^infra/cdk.out') 2>/dev/null || true)
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
go vet ./...
STATICCHECK="go run honnef.co/go/tools/cmd/staticcheck@v0.8.0"
$STATICCHECK ./...
if [ -f infra/go.mod ]; then (cd infra && go vet ./... && $STATICCHECK ./...); fi
echo "lint: clean"
