#!/usr/bin/env bash
# Rebuilds third_party/quic-go from the upstream module and quic-go.patch, or,
# with --check, verifies that the committed tree is exactly that.
#
# Only the packages kvmesh builds are kept, without their tests; go.mod and
# LICENSE come along unchanged.
set -euo pipefail

version=v0.65.0
packages=(
	.
	internal/ackhandler
	internal/congestion
	internal/handshake
	internal/monotime
	internal/protocol
	internal/qerr
	internal/utils
	internal/utils/linkedlist
	internal/utils/minheap
	internal/utils/ringbuffer
	internal/wire
	qlog
	qlogwriter
	qlogwriter/jsontext
	quicvarint
)

here=$(cd "$(dirname "$0")" && pwd)
dest=$here/quic-go
check=false
[[ ${1:-} == --check ]] && check=true

# Outside the kvmesh module, so that its replace directive does not apply.
upstream=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/quic-go/quic-go@$version" |
	sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -d $upstream ]] || { echo "quic-go $version: download failed" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for p in "${packages[@]}"; do
	mkdir -p "$work/tree/$p"
	find "$upstream/$p" -maxdepth 1 -type f -name '*.go' ! -name '*_test.go' -exec cp {} "$work/tree/$p/" \;
done
cp "$upstream/go.mod" "$upstream/LICENSE" "$work/tree/"
chmod -R u+w "$work/tree"
patch -s -d "$work/tree" -p1 <"$here/quic-go.patch"

if $check; then
	diff -r "$work/tree" "$dest" && echo "third_party/quic-go matches quic-go $version + quic-go.patch"
	exit
fi
rm -rf "$dest"
mv "$work/tree" "$dest"
echo "third_party/quic-go: quic-go $version + quic-go.patch"
