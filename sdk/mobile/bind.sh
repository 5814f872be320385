#!/usr/bin/env bash
# Proves that package danmaku/sdk/mobile binds: runs gobind (the module's
# `go tool gobind`, pinned in go.mod) for Go, Java and Objective-C into a
# temporary directory, checks that the classes and header apps use were
# generated and that gobind skipped nothing (an exported name with a type it
# cannot carry is left out with a "// skipped" comment rather than failing),
# then compiles the generated Java and a usage sample with the names
# docs/mobile.md uses. Exits non-zero on any failure.
#
# Needs: go. javac (any JDK) for the compile step; without it that step is
# skipped, unless CI or DANMAKU_REQUIRE_SERVERS is set, when it fails.
# Neither the Android SDK/NDK nor Xcode is needed: gobind only generates
# source; `gomobile bind` builds the .aar/.xcframework (docs/mobile.md).
set -euo pipefail

cd "$(dirname "$0")"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

fail() { echo "bind.sh: $*" >&2; exit 1; }

# As internal/testenv: set to anything but "", 0, false or no.
required() {
	local v
	for v in "${CI:-}" "${DANMAKU_REQUIRE_SERVERS:-}"; do
		case "${v,,}" in "" | 0 | false | no) ;; *) return 0 ;; esac
	done
	return 1
}

go tool gobind -lang=go,java,objc -outdir "$out/gen" danmaku/sdk/mobile ||
	fail "gobind failed (install it with: go get -tool golang.org/x/mobile/cmd/gobind@<version>)"

for f in \
	java/mobile/Mobile.java java/mobile/Client.java java/mobile/Config.java \
	java/mobile/Listener.java java/mobile/Message.java java/mobile/Stats.java \
	src/gobind/Mobile.objc.h src/gobind/Mobile_darwin.m src/gobind/go_mobilemain.go; do
	[[ -s "$out/gen/$f" ]] || fail "gobind did not generate $f"
done

if skipped="$(grep -rn '// skipped ' "$out/gen")"; then
	fail "gobind skipped exported names (unsupported types):"$'\n'"$skipped"
fi

hdr="$out/gen/src/gobind/Mobile.objc.h"
for decl in '@interface MobileClient ' '@interface MobileConfig ' '@interface MobileMessage ' \
	'@interface MobileStats ' '@protocol MobileListener ' 'MobileNewClient(' 'MobileErrorCode(' \
	'- (MobileMessage* _Nullable)next;' '- (BOOL)send:' '- (BOOL)announce:' '- (BOOL)start:' \
	'- (void)onState:(long)state;' 'const long MobileStateLive;' 'const long MobileKindGift;'; do
	grep -qF -- "$decl" "$hdr" || fail "Mobile.objc.h lacks: $decl"
done

if ! command -v javac >/dev/null; then
	if required; then
		fail "javac not found (apt-get install default-jdk-headless)"
	fi
	echo "bind.sh: javac not found: generated Java not compiled (apt-get install default-jdk-headless)"
	echo "bind.sh: ok (gobind: go, java, objc)"
	exit 0
fi

# The generated runtime (go.Seq) refers to android.content.Context only as a
# type; a stub stands in for the Android SDK.
mkdir -p "$out/stub/android/content" "$out/sample/example" "$out/classes"
echo 'package android.content; public class Context {}' >"$out/stub/android/content/Context.java"
cat >"$out/sample/example/Usage.java" <<'EOF'
package example;

import mobile.Client;
import mobile.Config;
import mobile.Listener;
import mobile.Message;
import mobile.Mobile;
import mobile.Stats;

// What docs/mobile.md's Kotlin snippet calls, in Java.
class Usage {
	static long use() throws Exception {
		Config cfg = new Config();
		cfg.setEntryURL("https://entry.example.com");
		cfg.setRoom("concert-42");
		cfg.setTicket("ticket");
		cfg.setFirstJoinJitterMs(0);
		cfg.setRenderVisible(32);
		cfg.setRenderBuffer(120);
		cfg.setRenderDisplayMs(8000);
		Client c = Mobile.newClient(cfg);
		c.start(new Listener() {
			@Override public void onState(long state) {
				if (state == Mobile.StateJoining || state == Mobile.StateLive || state == Mobile.StateStopped) {
					return;
				}
			}
			@Override public void onMessage(Message m) {
				String s = m.getID() + m.getUser() + m.getNick() + m.getAvatar() + m.getText()
					+ m.getGift() + m.getRole() + m.getMerged();
				long n = m.getKind() + m.getValue() + m.getCount() + m.getMergedCount();
				if (m.getKind() == Mobile.KindGift || m.getKind() == Mobile.KindSystem || m.getKind() == Mobile.KindBarrage) {
					return;
				}
			}
			@Override public void onError(String code, String message) {
				if (code.equals(Mobile.ErrCodeJoinRefused)) {
					return;
				}
			}
		});
		try {
			c.send("hello");
			c.announce("welcome");
		} catch (Exception e) {
			String code = Mobile.errorCode(e);
			if (code.equals(Mobile.ErrCodeTextTooLong) || code.equals(Mobile.ErrCodeEmptyText)
				|| code.equals(Mobile.ErrCodeClosed) || code.equals(Mobile.ErrCodeNetwork)
				|| code.equals(Mobile.ErrCodeConfig) || code.equals(Mobile.ErrCodeAlreadyStarted)
				|| code.equals(Mobile.ErrCodeNoIngest) || code.equals(Mobile.ErrCodeUnknown)) {
				return 0;
			}
		}
		for (Message m = c.next(); m != null; m = c.next()) {
			m.getText();
		}
		c.setHidden(true);
		boolean hidden = c.hidden();
		Stats s = c.stats();
		String role = c.role();
		c.stop();
		return c.newCount() + c.onScreen() + c.waiting() + s.getDelivered() + s.getRenderDroppedHidden()
			+ s.getRenderDroppedOverflow() + s.getSendsPosted() + (hidden ? 1 : 0) + role.length();
	}
}
EOF
mapfile -t java < <(find "$out/gen/java" "$out/stub" "$out/sample" -name '*.java')
javac -nowarn -encoding UTF-8 -d "$out/classes" "${java[@]}" || fail "the generated Java does not compile"
echo "bind.sh: ok (gobind: go, java, objc; Java compiled with $(javac -version 2>&1))"
