#!/usr/bin/env bash
# provision-account: create one account for each signup, however often this
# is killed and run again.
#
#   examples/provision-account.sh STATE_DIR
#
# The job creates the account at the identity provider, then records its id
# on the signup. The provider takes no idempotency key: every create makes a
# new account.
# The window: a kill after the provider created the account but before its
# id is recorded. The next run would create a second account. Closed by
# looking before creating when an earlier try may have got that far: when
# idem says IDEM_RECOVERED=1 (the last run of this key died without an
# outcome) or IDEM_ATTEMPT > 1 (an earlier attempt of this run failed), the
# job first asks the provider for an account with the signup's e-mail and
# adopts it. A first attempt skips that lookup, which in a real provider is
# a slow search.
#
# idem adds: it tells the job when to look. It sets IDEM_RECOVERED only
# once every process of the lost run is gone, so no create of that run can
# still land after the lookup. And a provisioned signup is skipped, two
# copies never provision one signup at once, failures are retried.
# Not covered: a run that failed on all its attempts after creating the
# account, then a new run (neither recovered nor a retry); a job whose
# failures can come after the create should look on every run.
set -euo pipefail

examples=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
PATH=$examples/stand-ins:$PATH

# The job, run by idem once per signup: provision-account.sh --job STATE SIGNUP
provision() {
  local state=$1 signup=$2 account email
  account=$(db "$state/app.db" "SELECT account_id FROM signups WHERE id = '$signup'")
  if [[ -n $account ]]; then
    return 0
  fi
  email=$(db "$state/app.db" "SELECT email FROM signups WHERE id = '$signup'")
  if [[ ${IDEM_RECOVERED:-} == 1 || ${IDEM_ATTEMPT:-1} -gt 1 ]]; then
    account=$(accounts "$state" find "$email")
    if [[ -n $account ]]; then
      echo "found $account for $email, made by an interrupted run"
    fi
  fi
  if [[ -z $account ]]; then
    account=$(accounts "$state" create "$email")
  fi
  sleep 0.2 # the dangerous window: created, not yet recorded
  db "$state/app.db" "UPDATE signups SET account_id = '$account' WHERE id = '$signup'"
  echo "$signup provisioned: $account"
}

if [[ ${1:-} == --job ]]; then
  provision "$2" "$3"
  exit
fi

state=$(mkdir -p "${1:?usage: provision-account.sh STATE_DIR}" && cd "$1" && pwd -P)
export IDEM_DB=$state/ledger.db

db "$state/app.db" "
  CREATE TABLE IF NOT EXISTS signups (
    id TEXT PRIMARY KEY, email TEXT NOT NULL, account_id TEXT);
  INSERT OR IGNORE INTO signups (id, email) VALUES
    ('signup-1', 'kim@example.com'), ('signup-2', 'lee@example.com'),
    ('signup-3', 'max@example.com'), ('signup-4', 'noor@example.com'),
    ('signup-5', 'olu@example.com'), ('signup-6', 'pat@example.com');"

for signup in $(db "$state/app.db" "SELECT id FROM signups ORDER BY rowid"); do
  idem run --key "provision-account-$signup" --wait 30s -- \
    "$examples/provision-account.sh" --job "$state" "$signup"
done
