#!/usr/bin/env bash
# Prints the environment file of one danmaku role from an event's Terraform
# state: the file the machines of that role boot with (output env_ROLE),
# for running the role anywhere else — a canary, an operator's box, a load
# test.
#
#   env.sh [--secrets] STATE ROLE > ROLE.env
#   set -a; . ./ROLE.env; set +a; danmaku ROLE <the flags the file names>
#
# STATE  the event's Terraform working directory (initialised, with its
#        backend and workspace selected) or a .tfstate file
# ROLE   gslb, ingest, edge or slicer
#
# Secrets appear as "# secret NAME ARN" comments. With --secrets they are
# fetched with the AWS CLI (the caller needs secretsmanager:GetSecretValue on
# them) and written as NAME='value' lines: guard that file like the secrets
# themselves. Per-machine values (DANMAKU_NODE_ID, an edge's or ingest's
# public URL, and with node TLS the certificate and key files its flags
# name) are named in the file's header: add them yourself.
#
# TERRAFORM names another terraform binary.
set -euo pipefail

usage() {
	echo "usage: env.sh [--secrets] STATE ROLE   (ROLE: gslb, ingest, edge or slicer)" >&2
	exit 2
}

secrets=false
if [[ ${1:-} == --secrets ]]; then
	secrets=true
	shift
fi
[[ $# -eq 2 ]] || usage
state=$1 role=$2
case $role in
gslb | ingest | edge | slicer) ;;
*) usage ;;
esac
tf=${TERRAFORM:-terraform}

if [[ -d $state ]]; then
	env_file="$("$tf" -chdir="$state" output -raw "env_$role")"
	region="$("$tf" -chdir="$state" output -raw region)"
elif [[ -f $state ]]; then
	env_file="$("$tf" output -state="$state" -raw "env_$role")"
	region="$("$tf" output -state="$state" -raw region)"
else
	echo "env.sh: $state is neither a directory nor a state file" >&2
	exit 2
fi

while IFS= read -r line; do
	if $secrets && [[ $line == "# secret "* ]]; then
		read -r _ _ name arn <<<"$line"
		value="$(aws secretsmanager get-secret-value --region "$region" --secret-id "$arn" --query SecretString --output text)"
		# Shell quoting: a secret may hold any character.
		printf "%s='%s'\n" "$name" "${value//\'/\'\\\'\'}"
	else
		printf '%s\n' "$line"
	fi
done <<<"$env_file"
