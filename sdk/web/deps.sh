#!/usr/bin/env bash
# Installs what the browser tests of sdk/web need, only where it is missing,
# and says what it did:
#   chromium   Debian package chromium (/usr/bin/chromium; apt-get)
#   node, npm  Debian packages nodejs, npm (apt-get)
#   node_modules  `npm ci` of sdk/web's package-lock.json (playwright-core,
#              esbuild, @msgpack/msgpack, hls.js) into sdk/web/node_modules
# With --fonts also Debian's fonts-noto-cjk and fonts-noto-color-emoji, so
# that a screenshot shows Chinese and emoji comments instead of empty boxes
# (the tests do not need them).
# Playwright never downloads a browser here: the tests launch Debian's
# chromium through playwright-core's executablePath.
# apt-get needs root (or sudo).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

have() { command -v "$1" >/dev/null 2>&1; }

packages=()
[[ -x /usr/bin/chromium ]] || packages+=(chromium)
have node || packages+=(nodejs)
have npm || packages+=(npm)
if [[ ${1:-} == --fonts ]]; then
	for f in fonts-noto-cjk fonts-noto-color-emoji; do
		dpkg-query -W -f='${Status}' "$f" 2>/dev/null | grep -q 'ok installed' || packages+=("$f")
	done
fi

if ((${#packages[@]} > 0)); then
	sudo=()
	if [[ $(id -u) != 0 ]]; then
		have sudo || { echo "web deps: need root or sudo to install ${packages[*]}" >&2; exit 1; }
		sudo=(sudo)
	fi
	echo "web deps: apt-get install ${packages[*]}"
	"${sudo[@]}" apt-get update -q
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}"
else
	echo "web deps: chromium, node and npm${1:+ and fonts} already installed"
fi

# npm ci wipes and reinstalls node_modules; skip it when the lockfile npm
# last installed from is the committed one.
if [[ -L node_modules ]]; then
	# A worktree may share another checkout's node_modules through a link:
	# npm ci would empty the linked directory under the other checkout.
	echo "web deps: node_modules is a link; not reinstalling through it"
elif [[ -f node_modules/.package-lock.json ]] && [[ node_modules/.package-lock.json -nt package-lock.json ]] \
	&& [[ -d node_modules/playwright-core ]] && [[ -d node_modules/@msgpack/msgpack ]] && [[ -d node_modules/hls.js ]]; then
	echo "web deps: node_modules up to date"
else
	echo "web deps: npm ci (sdk/web)"
	# PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: playwright-core has no install hook
	# today; this keeps a future one from fetching a browser build.
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
fi
