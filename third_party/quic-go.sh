#!/usr/bin/env bash
# Rebuilds third_party/quic-go from the upstream module and quic-go.patch, or,
# with --check, verifies that the committed tree is exactly that.
#
# Only the packages kvmesh builds are kept, without their tests; go.mod and
# LICENSE come along unchanged. The upstream module is verified against the
# hash pinned here (go.sum no longer lists it once it is replaced).
set -euo pipefail

version=v0.65.0
sum=h1:BJQSjdTvLPLmWtaCupUphRbgxgpZhdO/GMpr9Eoe3B4=
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

case "${1:-}" in
"") check=false ;;
--check) check=true ;;
*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
dest=$here/quic-go

# Outside the kvmesh module, so that its replace directive does not apply.
if ! info=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/quic-go/quic-go@$version"); then
	echo "quic-go $version: download failed: $info" >&2
	exit 1
fi
field() { sed -n 's/^\t"'"$1"'": "\(.*\)",\{0,1\}$/\1/p' <<<"$info"; }
upstream=$(field Dir)
if [[ $(field Sum) != "$sum" || ! -d $upstream ]]; then
	echo "quic-go $version: got hash $(field Sum) in '$upstream', want $sum" >&2
	exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for p in "${packages[@]}"; do
	mkdir -p "$work/tree/$p"
	find "$upstream/$p" -maxdepth 1 -type f -name '*.go' ! -name '*_test.go' -exec cp {} "$work/tree/$p/" \;
done
cp "$upstream/go.mod" "$upstream/LICENSE" "$work/tree/"
chmod -R u+w "$work/tree"
# Exact context only, and no .orig files: the patch must apply as written.
patch -s -F0 --no-backup-if-mismatch -d "$work/tree" -p1 <"$here/quic-go.patch"

if $check; then
	diff -r "$work/tree" "$dest" && echo "third_party/quic-go matches quic-go $version + quic-go.patch"
	exit
fi
rm -rf "$dest"
mv "$work/tree" "$dest"
echo "third_party/quic-go: quic-go $version + quic-go.patch"
