#!/usr/bin/env bash
# Checks infra/terraform without an AWS account:
#
#   test.sh [check]   terraform fmt -check, validate, and terraform test with
#                     a mocked AWS provider (the module's tests/, those of
#                     modules/segments-bucket, and a plan of each
#                     examples/*.tfvars); bash -n of the shell scripts; the
#                     CloudFront Function on sample requests (node); the
#                     node-name cleaner against a fake Route 53 (python3)
#   test.sh s3-apply  applies testdata/s3-compat (modules/segments-bucket) to
#                     an S3-compatible server and prints `terraform output
#                     -json`; the server comes from DANMAKU_TF_S3_ENDPOINT,
#                     DANMAKU_TF_S3_ACCESS_KEY, DANMAKU_TF_S3_SECRET_KEY,
#                     DANMAKU_TF_S3_BUCKET (terraform_test.go starts one)
#   test.sh render    applies the module with the mocked provider as
#                     testdata/conformance describes and prints `terraform
#                     test -verbose -json`: its test_state line holds every
#                     root output (env_ROLE, boot_user_data, ...), which
#                     conformance_test.go starts the roles from
#   test.sh tools     only finds terraform and the AWS provider
#
# Everything runs in a temporary copy of this directory, so no .terraform,
# lock file or state is left in the repository.
#
# The AWS provider (hashicorp/aws, the version versions.tf asks for) comes
# from, in this order:
#   1. DANMAKU_TF_PLUGIN_MIRROR: a directory laid out as a Terraform
#      filesystem mirror, registry.terraform.io/hashicorp/aws/VERSION/OS_ARCH/
#   2. the Terraform CLI configuration in effect (TF_CLI_CONFIG_FILE,
#      ~/.terraformrc), if it has a provider_installation block
#   3. Terraform's implied local mirrors (~/.terraform.d/plugins,
#      ~/.local/share/terraform/plugins, /usr/local/share/terraform/plugins,
#      /usr/share/terraform/plugins), then a shallow search for a
#      registry.terraform.io directory under /opt, /usr/local/share and
#      /usr/share
#   4. the public registry, if this machine reaches it
# For 1 and 3 a temporary CLI configuration installs hashicorp/* from that
# mirror only.
#
# Exit status: 0 passed; 1 failed; 3 skipped because terraform (>= 1.7) or
# the provider is missing. When CI or DANMAKU_REQUIRE_SERVERS is set, a
# missing tool fails (1) instead: CI must never pass by skipping.
# TERRAFORM names another terraform binary.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode="${1:-check}"
tf="${TERRAFORM:-terraform}"
provider_constraint="5.100" # the lowest release versions.tf accepts (~> 5.100)

log() { printf 'test.sh: %s\n' "$*" >&2; }

required() {
	local v
	for v in "${CI:-}" "${DANMAKU_REQUIRE_SERVERS:-}"; do
		case "${v,,}" in
		"" | 0 | false | no) ;;
		*) return 0 ;;
		esac
	done
	return 1
}

# missing MESSAGE: a prerequisite is absent; skip, or fail when required.
missing() {
	log "$1"
	cat >&2 <<'EOF'
test.sh: to run these checks, install Terraform >= 1.7 (https://developer.hashicorp.com/terraform/install)
test.sh: and give it hashicorp/aws ~> 5.100: either a network that reaches the
test.sh: Terraform registry, or a filesystem mirror named by DANMAKU_TF_PLUGIN_MIRROR
test.sh: (create one elsewhere with: terraform providers mirror DIR, in this directory).
EOF
	if required; then
		log "FAIL: CI or DANMAKU_REQUIRE_SERVERS is set, so a missing tool is a failure"
		exit 1
	fi
	log "SKIP"
	exit 3
}

case "$mode" in
check | s3-apply | render | tools) ;;
*)
	log "usage: test.sh [check|s3-apply|render|tools]"
	exit 2
	;;
esac

# --- terraform --------------------------------------------------------------
if ! command -v "$tf" >/dev/null 2>&1; then
	missing "terraform not found (set TERRAFORM to its path)"
fi
tf_version_json="$("$tf" version -json 2>/dev/null)" || missing "$tf version failed"
tf_version="$(sed -n 's/.*"terraform_version": *"\([0-9.]*\).*/\1/p' <<<"$tf_version_json")"
platform="$(sed -n 's/.*"platform": *"\([a-z0-9_]*\)".*/\1/p' <<<"$tf_version_json")"
if [[ -z $tf_version || -z $platform ]]; then
	missing "cannot read the version of $tf"
fi
IFS=. read -r major minor _ <<<"$tf_version"
if ((major < 1 || (major == 1 && minor < 7))); then
	missing "terraform $tf_version is too old: mock providers need 1.7 or later"
fi

# --- the AWS provider -------------------------------------------------------
# mirror_versions DIR: the hashicorp/aws versions DIR holds for this
# platform, unpacked (VERSION/OS_ARCH/) or packed (zip) layout.
mirror_versions() {
	local d="$1/registry.terraform.io/hashicorp/aws" f
	[[ -d $d ]] || return 0
	for f in "$d"/*/"$platform" "$d"/terraform-provider-aws_*_"$platform".zip; do
		[[ -e $f ]] || continue
		if [[ $f == *.zip ]]; then
			f="${f##*/terraform-provider-aws_}"
			echo "${f%%_*}"
		else
			basename "$(dirname "$f")"
		fi
	done | sort -uV
}

# usable VERSION: true if VERSION satisfies ~> 5.100.
usable() {
	[[ $1 == 5.* ]] && [[ "$(printf '%s\n%s\n' "$provider_constraint" "$1" | sort -V | head -n1)" == "$provider_constraint" ]]
}

mirror=""
cli_config_has_installation() {
	local f="${TF_CLI_CONFIG_FILE:-$HOME/.terraformrc}"
	[[ -f $f ]] && grep -q 'provider_installation' "$f"
}

if [[ -n ${DANMAKU_TF_PLUGIN_MIRROR:-} ]]; then
	[[ -d $DANMAKU_TF_PLUGIN_MIRROR ]] || missing "DANMAKU_TF_PLUGIN_MIRROR=$DANMAKU_TF_PLUGIN_MIRROR is not a directory"
	mirror="$DANMAKU_TF_PLUGIN_MIRROR"
elif cli_config_has_installation; then
	log "provider: as the CLI configuration ${TF_CLI_CONFIG_FILE:-$HOME/.terraformrc} says"
else
	candidates=(
		"$HOME/.terraform.d/plugins"
		"${XDG_DATA_HOME:-$HOME/.local/share}/terraform/plugins"
		/usr/local/share/terraform/plugins
		/usr/share/terraform/plugins
	)
	for root in /opt /usr/local/share /usr/share; do
		[[ -d $root ]] || continue
		while IFS= read -r d; do
			candidates+=("$(dirname "$d")")
		done < <(find "$root" -maxdepth 3 -type d -name registry.terraform.io 2>/dev/null | sort)
	done
	for c in "${candidates[@]}"; do
		if [[ -n "$(mirror_versions "$c")" ]]; then
			mirror="$c"
			break
		fi
	done
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/danmaku-tf.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if [[ -n $mirror ]]; then
	versions="$(mirror_versions "$mirror" | paste -sd ' ' -)"
	ok=""
	for v in $versions; do
		if usable "$v"; then ok="$v"; fi
	done
	if [[ -z $ok ]]; then
		missing "the mirror $mirror holds hashicorp/aws ${versions:-none} for $platform; this module needs ~> $provider_constraint"
	fi
	log "provider: hashicorp/aws $ok for $platform from the filesystem mirror $mirror"
	# A CLI configuration of our own: hashicorp/* from the mirror and never
	# the network, everything else as usual.
	cat >"$work/cli.tfrc" <<EOF
provider_installation {
  filesystem_mirror {
    path    = "$mirror"
    include = ["hashicorp/*"]
  }
  direct {
    exclude = ["hashicorp/*"]
  }
}
EOF
	export TF_CLI_CONFIG_FILE="$work/cli.tfrc"
elif ! cli_config_has_installation; then
	if [[ -n ${TF_CLI_CONFIG_FILE:-} && ! -f $TF_CLI_CONFIG_FILE ]]; then
		# Terraform warns on every command about a configuration file that
		# does not exist.
		unset TF_CLI_CONFIG_FILE
	fi
	log "provider: no filesystem mirror found; trying the Terraform registry"
fi
export TF_IN_AUTOMATION=1 TF_INPUT=0 CHECKPOINT_DISABLE=1
unset TF_DATA_DIR TF_WORKSPACE

# A copy without anything an earlier local run may have left.
mkdir "$work/module"
tar -C "$here" --exclude=.terraform --exclude='.terraform.lock.hcl' --exclude='*.tfstate*' -cf - . | tar -C "$work/module" -xf -
# observability.tf reads the rule files and dashboards of ../observability.
mkdir "$work/observability"
cp -R "$here/../observability/rules" "$here/../observability/dashboards" "$work/observability/"
cd "$work/module"

# init DIR: terraform init in DIR; a provider that cannot be installed is a
# missing tool, anything else a failure.
init() {
	local out
	if ! out="$(cd "$1" && "$tf" init -backend=false -no-color 2>&1)"; then
		if grep -qE 'Failed to (query|install) (available )?provider|could not connect|no such host|Failed to resolve provider|does not have a package available' <<<"$out"; then
			missing "cannot install hashicorp/aws in $1:"$'\n'"$out"
		fi
		printf '%s\n' "$out" >&2
		log "FAIL: terraform init in $1"
		exit 1
	fi
}

if [[ $mode == tools ]]; then
	init .
	log "ok: terraform $tf_version ($platform), hashicorp/aws installable"
	exit 0
fi

if [[ $mode == s3-apply ]]; then
	: "${DANMAKU_TF_S3_ENDPOINT:?}" "${DANMAKU_TF_S3_ACCESS_KEY:?}" "${DANMAKU_TF_S3_SECRET_KEY:?}" "${DANMAKU_TF_S3_BUCKET:?}"
	cd testdata/s3-compat
	init .
	# Credentials through TF_VAR_, so they show in no process list.
	export TF_VAR_endpoint="$DANMAKU_TF_S3_ENDPOINT" TF_VAR_access_key="$DANMAKU_TF_S3_ACCESS_KEY"
	export TF_VAR_secret_key="$DANMAKU_TF_S3_SECRET_KEY" TF_VAR_bucket="$DANMAKU_TF_S3_BUCKET"
	export TF_VAR_region="${DANMAKU_TF_S3_REGION:-us-east-1}"
	"$tf" apply -auto-approve -no-color >&2
	"$tf" output -json
	exit 0
fi

if [[ $mode == render ]]; then
	init .
	if ! "$tf" test -test-directory=testdata/conformance -verbose -json -no-color >"$work/render.json"; then
		# Everything but the state, which is megabytes of provider schemas.
		grep -v '"type":"test_state"' "$work/render.json" >&2
		log "FAIL: terraform test -test-directory=testdata/conformance"
		exit 1
	fi
	cat "$work/render.json"
	exit 0
fi

step() { log "--- $*"; }

step "bash -n on the shell scripts"
for f in node-boot.sh observability-boot.sh env.sh test.sh; do
	bash -n "$f"
done

step "the CloudFront Function on sample requests (node)"
if command -v node >/dev/null 2>&1; then
	node tests/refuse-escapes.mjs >&2
elif required; then
	log "FAIL: node not found, and CI or DANMAKU_REQUIRE_SERVERS is set, so a missing tool is a failure"
	exit 1
else
	log "node not found: refuse-escapes.js not run (terraform validate still checks its resource)"
fi

step "the node-name cleaner against a fake Route 53 (python3)"
if command -v python3 >/dev/null 2>&1; then
	python3 tests/node-records_test.py >&2
elif required; then
	log "FAIL: python3 not found, and CI or DANMAKU_REQUIRE_SERVERS is set, so a missing tool is a failure"
	exit 1
else
	log "python3 not found: node-records.py not run (terraform test still checks its document)"
fi

step "terraform fmt -check -recursive"
if ! "$tf" fmt -check -recursive -diff -no-color; then
	log "FAIL: run terraform fmt -recursive in infra/terraform"
	exit 1
fi

step "terraform init + validate (root module)"
init .
init modules/segments-bucket
"$tf" validate -no-color

# Each example becomes a run of its own: a .tfvars file is valid as the
# body of a test's variables block, and one terraform test for the module
# and every example starts the provider fewer times than one per example.
# Every example must plan without a wait AWS cannot meet; the concert must
# hold its audience with a zone lost.
for example in examples/*.tfvars; do
	name="$(basename "$example" .tfvars)"
	{
		echo '# Generated by test.sh from '"$example"': the example must plan.'
		echo 'mock_provider "aws" {'
		echo '  source = "./tests/mocks"'
		echo '}'
		echo 'run "example_'"${name//-/_}"'" {'
		echo '  command = plan'
		echo '  variables {'
		cat "$example"
		echo '  }'
		echo '  assert {'
		echo '    condition     = aws_autoscaling_group.role["edge"].min_size == var.edge_fleet.count && aws_autoscaling_group.role["slicer"].min_size >= 2'
		echo '    error_message = "The example plans the fleets it describes."'
		echo '  }'
		echo '  assert {'
		echo '    condition     = alltrue([for lb in aws_lb.gslb : length(lb.minimum_load_balancer_capacity) == 0]) && alltrue([for g in aws_autoscaling_group.role : g.wait_for_capacity_timeout == "0" && g.ignore_failed_scaling_activities])'
		echo '    error_message = "The example plans no capacity reservation and no wait for its fleets."'
		echo '  }'
		if [[ $name == concert-10m ]]; then
			# 16 vCPU edges: the mocked instance type is the real one's size.
			echo '  assert {'
			echo '    condition     = floor(var.edge_fleet.count * 2 / 3) * output.node_capacity.edge_max_conns * 0.95 >= 10000000 && output.node_capacity.edge_max_conns == 35000'
			echo '    error_message = "Ten million viewers fit the edges of two zones out of three, each below the gslb'"'"'s 95 % (35,000 connections per c6in.4xlarge: 32 µs of CPU per TLS frame, docs/benchmarks.md)."'
			echo '  }'
			echo '  assert {'
			echo '    condition     = 1000000 / 25 <= var.gslb_load_balancers * 15000'
			echo '    error_message = "The join surge (1,000,000 new connections a second, 25 per LCU) fits the load balancers'"'"' reservations of at most 15,000 LCU each."'
			echo '  }'
		fi
		echo '}'
	} >"tests/example-$name.tftest.hcl"
done

# Each plan `danmaku plan` wrote (examples/plan/NAME.tfvars, sizing only)
# is planned on top of the site variables of examples/NAME.tfvars, as an
# operator applies it (-var-file=site -var-file=plan): the file's variables
# block holds the site's, the run's the plan's, which take precedence. It
# must plan the fleets it describes and hold the event's viewers with the
# zones it may lose gone.
for planned in examples/plan/*.tfvars; do
	[[ -e $planned ]] || continue
	name="$(basename "$planned" .tfvars)"
	site="examples/$name.tfvars"
	event="examples/plan/$name.event.json"
	if [[ ! -f $site || ! -f $event ]]; then
		log "FAIL: $planned needs $site (the site's variables) and $event (the event it was planned from)"
		exit 1
	fi
	viewers="$(sed -n 's/^ *"viewers": *\([0-9][0-9]*\).*/\1/p' "$event")"
	lost="$(sed -n 's/^ *"zones_lost": *\([0-9][0-9]*\).*/\1/p' "$event")"
	if [[ -z $viewers || -z $lost ]]; then
		log "FAIL: cannot read viewers and zones_lost from $event"
		exit 1
	fi
	{
		echo '# Generated by test.sh from '"$planned"' over '"$site"': the plan must plan.'
		echo 'mock_provider "aws" {'
		echo '  source = "./tests/mocks"'
		echo '}'
		echo 'variables {'
		cat "$site"
		echo '}'
		echo 'run "planned_'"${name//-/_}"'" {'
		echo '  command = plan'
		echo '  variables {'
		cat "$planned"
		echo '  }'
		echo '  assert {'
		echo '    condition     = aws_autoscaling_group.role["edge"].min_size == var.edge_fleet.count && aws_autoscaling_group.role["ingest"].min_size == var.ingest_fleet.count && aws_autoscaling_group.role["gslb"].min_size == var.gslb_fleet.count && aws_autoscaling_group.role["slicer"].min_size == var.slicer_fleet.count'
		echo '    error_message = "The plan'"'"'s fleets are the ones planned."'
		echo '  }'
		echo '  assert {'
		echo '    condition     = output.node_capacity.edge_max_conns == var.edge_max_conns && output.node_capacity.ingest_capacity == var.ingest_capacity'
		echo '    error_message = "The edges and ingests report the capacity the plan gave them."'
		echo '  }'
		echo '  assert {'
		echo '    condition     = (var.edge_fleet.count - '"$lost"' * ceil(var.edge_fleet.count / length(var.availability_zones))) * var.edge_max_conns * 0.95 >= '"$viewers"
		echo '    error_message = "The event'"'"'s '"$viewers"' viewers fit the edges left after '"$lost"' zone(s) lost, each below the gslb'"'"'s 95 %."'
		echo '  }'
		echo '}'
	} >"tests/planned-$name.tftest.hcl"
done

step "terraform test (modules/segments-bucket, and the root module with each example; mocked AWS)"
# The two run side by side; their logs are shown one after the other.
(cd modules/segments-bucket && "$tf" test -no-color) >"$work/bucket.log" 2>&1 &
bucket_pid=$!
root_status=0
"$tf" test -no-color >"$work/root.log" 2>&1 || root_status=$?
bucket_status=0
wait "$bucket_pid" || bucket_status=$?
cat "$work/bucket.log" "$work/root.log" >&2
if ((bucket_status != 0 || root_status != 0)); then
	log "FAIL: terraform test"
	exit 1
fi

step "env.sh against a state file"
cat >"$work/outputs.tfstate" <<'EOF'
{"version": 4, "terraform_version": "1.7.0", "serial": 1, "lineage": "env-sh-check",
 "outputs": {
  "region": {"value": "us-east-1", "type": "string"},
  "env_edge": {"type": "string", "value": "# Flags: danmaku edge -edge 0.0.0.0:7702 -metrics-addr 0.0.0.0:7712\nDANMAKU_REDIS='rediss://cfg.example:6379'\nDANMAKU_REDIS_USER='danmaku-edge'\n# secret DANMAKU_REDIS_PASSWORD arn:aws:secretsmanager:us-east-1:123456789012:secret:x\n"}
 },
 "resources": []}
EOF
env_out="$(TERRAFORM="$tf" bash env.sh "$work/outputs.tfstate" edge)"
env_redis="$(set -a && eval "$env_out" && printf '%s %s' "$DANMAKU_REDIS" "$DANMAKU_REDIS_USER")"
if [[ $env_redis != "rediss://cfg.example:6379 danmaku-edge" || $env_out != *"# secret DANMAKU_REDIS_PASSWORD arn:"* ]]; then
	printf '%s\n' "$env_out" >&2
	log "FAIL: env.sh printed the above"
	exit 1
fi
if TERRAFORM="$tf" bash env.sh "$work/outputs.tfstate" origin 2>/dev/null; then
	log "FAIL: env.sh accepted an unknown role"
	exit 1
fi

log "ok"
