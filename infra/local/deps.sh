#!/usr/bin/env bash
# Installs what the integration tests and the local stack need, only where it
# is missing, and says what it did:
#   redis-server  Debian package redis-server (apt-get)
#   redis-cli     Debian package redis-tools (a dependency of redis-server;
#                 the Redis Cluster tests and cluster.sh create clusters
#                 with redis-cli --cluster create)
#   varnishd      Debian package varnish      (apt-get; brings gcc, which
#                 varnishd uses to compile its VCL)
#   gcc           Debian packages gcc, libc6-dev (go test -race needs cgo)
#   javac         Debian package default-jdk-headless (sdk/mobile's binding
#                 check compiles the Java that gobind generates)
#   promtool,     Debian package prometheus   (the alert and recording rules
#   prometheus                                  are checked and unit-tested with
#                 promtool; the local stack and its alert test run the server)
#   ffmpeg        Debian package ffmpeg (the demo's live HLS test stream with
#                 program date times, internal/hlsdemo; dev runs without it)
#   stress-ng     Debian package stress-ng (make test-hog's CPU hog)
#   versitygw     go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
# apt-get needs root (or sudo). The distribution's own redis and varnish
# services are not started: the tests and infra/local run their own servers.
set -euo pipefail

VERSITYGW_MODULE="github.com/versity/versitygw/cmd/versitygw@v1.8.0"

gobin="$(go env GOBIN)"
[[ -n $gobin ]] || gobin="$(go env GOPATH | cut -d: -f1)/bin"
PATH="$PATH:$gobin:/usr/sbin:/usr/local/sbin"

have() { command -v "$1" >/dev/null 2>&1; }

packages=()
have redis-server || packages+=(redis-server)
have redis-server && ! have redis-cli && packages+=(redis-tools)
have varnishd || packages+=(varnish)
# go test -race needs cgo, so a C compiler (the varnish package brings one too).
have gcc || packages+=(gcc libc6-dev)
have javac || packages+=(default-jdk-headless)
{ have promtool && have prometheus; } || packages+=(prometheus)
have ffmpeg || packages+=(ffmpeg)
have stress-ng || packages+=(stress-ng)

if ((${#packages[@]} > 0)); then
	sudo=()
	if [[ $(id -u) != 0 ]]; then
		have sudo || { echo "deps: need root or sudo to install ${packages[*]}" >&2; exit 1; }
		sudo=(sudo)
	fi
	# Keep the packages' init scripts from starting system-wide services
	# (policy-rc.d exit 101 = "not allowed"), unless the machine already
	# has a policy of its own.
	policy=/usr/sbin/policy-rc.d
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
		"${sudo[@]}" chmod 755 "$policy"
		trap '"${sudo[@]}" rm -f "$policy"' EXIT
	fi
	echo "deps: apt-get install ${packages[*]}"
	"${sudo[@]}" apt-get update -q
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}"
else
	echo "deps: redis-server, varnishd, gcc, javac, prometheus, ffmpeg and stress-ng already installed"
fi

if have versitygw; then
	echo "deps: versitygw already installed ($(command -v versitygw))"
else
	echo "deps: go install $VERSITYGW_MODULE"
	go install "$VERSITYGW_MODULE"
	echo "deps: installed $gobin/versitygw"
fi
