# Shared by the infra/local scripts; source it, don't run it.
#
# Settings (environment, with defaults):
#   DANMAKU_LOCAL_DIR      data, logs and pid files     (<repo>/.local)
#   DANMAKU_REDIS_PORT     Redis port                   (6390)
#   DANMAKU_S3_PORT        S3 (versitygw) port          (7070)
#   DANMAKU_CDN_PORT       CDN (Varnish) port           (7080)
#   DANMAKU_S3_BUCKET      bucket                       (danmaku)
#   DANMAKU_S3_ACCESS_KEY  S3 root access key           (danmaku-local)
#   DANMAKU_S3_SECRET_KEY  S3 root secret key           (danmaku-local-secret)
# Everything listens on 127.0.0.1 only.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LOCAL_DIR="${DANMAKU_LOCAL_DIR:-$REPO_ROOT/.local}"
mkdir -p "$LOCAL_DIR"
LOCAL_DIR="$(cd "$LOCAL_DIR" && pwd)"

REDIS_PORT="${DANMAKU_REDIS_PORT:-6390}"
S3_PORT="${DANMAKU_S3_PORT:-7070}"
CDN_PORT="${DANMAKU_CDN_PORT:-7080}"
S3_BUCKET="${DANMAKU_S3_BUCKET:-danmaku}"
S3_REGION="us-east-1"
export DANMAKU_S3_ACCESS_KEY="${DANMAKU_S3_ACCESS_KEY:-danmaku-local}"
export DANMAKU_S3_SECRET_KEY="${DANMAKU_S3_SECRET_KEY:-danmaku-local-secret}"

# Programs installed by `go install` and Debian's sbin are not always on PATH.
if command -v go >/dev/null 2>&1; then
	_gobin="$(go env GOBIN)"
	[[ -n $_gobin ]] || _gobin="$(go env GOPATH | cut -d: -f1)/bin"
	PATH="$PATH:$_gobin"
fi
PATH="$PATH:/usr/sbin:/usr/local/sbin"

log() { printf '%s\n' "$*"; }
die() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

# find_bin NAME HINT: prints the program's path or dies saying how to get it.
find_bin() {
	command -v "$1" 2>/dev/null || die "$1 not found; run 'make deps' ($2)"
}

# running NAME PIDFILE: true if the pid file names a live process called NAME.
running() {
	local pid cmd
	[[ -f $2 ]] || return 1
	pid="$(cat "$2")"
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	# Guard against a recycled pid: it must still be our program.
	cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
	[[ $cmd == *"$1"* ]]
}

# port_busy PORT: true if something accepts connections on 127.0.0.1:PORT.
port_busy() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# start_bg NAME PIDFILE LOGFILE CMD...: runs CMD detached from the terminal.
start_bg() {
	local name=$1 pidfile=$2 logfile=$3
	shift 3
	if command -v setsid >/dev/null 2>&1; then
		setsid nohup "$@" >>"$logfile" 2>&1 </dev/null &
	else
		nohup "$@" >>"$logfile" 2>&1 </dev/null &
	fi
	echo $! >"$pidfile"
	log "$name: started pid $! (log $logfile)"
}

# wait_until NAME PIDFILE LOGFILE CHECK...: polls CHECK for up to 15 s,
# failing early with the log if the process dies. (Only the pid is checked
# here, not its command line: right after start_bg the child may still be
# the forked shell, not yet the program.)
wait_until() {
	local name=$1 pidfile=$2 logfile=$3 pid i
	shift 3
	pid="$(cat "$pidfile")"
	for ((i = 0; i < 75; i++)); do
		if "$@"; then
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 20 "$logfile" >&2 || true
			die "$name exited while starting (log $logfile)"
		fi
		sleep 0.2
	done
	tail -n 20 "$logfile" >&2 || true
	die "$name not ready after 15 s (log $logfile)"
}

# stop_pid NAME PIDFILE: SIGTERM, up to 10 s grace, then SIGKILL.
stop_pid() {
	local name=$1 pidfile=$2 pid i
	if ! running "$name" "$pidfile"; then
		rm -f "$pidfile"
		log "$name: not running"
		return 0
	fi
	pid="$(cat "$pidfile")"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "$name: still running after 10 s, killing pid $pid"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile"
	log "$name: stopped"
}

# status_pid NAME PIDFILE ADDRESS
status_pid() {
	if running "$1" "$2"; then
		log "$1: running pid $(cat "$2") at $3"
	else
		log "$1: not running"
		return 1
	fi
}

# http_ok PORT PATH: true if GET http://127.0.0.1:PORT/PATH answers 200
# (plain bash, so curl is not needed).
http_ok() {
	local line
	line="$(
		exec 2>/dev/null
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1:%s\r\n\r\n' "$2" "$1" >&3
		IFS= read -r -t 2 line <&3 && printf '%s' "$line"
	)" || return 1
	[[ $line == "HTTP/1."?" 200"* ]]
}

# redis_ping PORT: true if Redis answers PING with +PONG.
redis_ping() {
	local line
	line="$(
		exec 2>/dev/null
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'PING\r\n' >&3
		IFS= read -r -t 2 line <&3 && printf '%s' "$line"
	)" || return 1
	[[ $line == "+PONG"* ]]
}

# dispatch ACTION: runs do_start, do_stop or do_status of the calling script.
dispatch() {
	case "${1:-start}" in
	start) do_start ;;
	stop) do_stop ;;
	status) do_status ;;
	*) die "usage: $(basename "$0") [start|stop|status]" ;;
	esac
}
