#!/usr/bin/env bash
# welcome-email: send each new user's welcome e-mail once, however often
# this is killed and run again.
#
#   examples/welcome-email.sh STATE_DIR
#
# The job checks before acting: a user whose "welcome sent" flag is set gets
# nothing; otherwise it hands the e-mail to the mailer, then sets the flag.
# The window: a kill after the mailer accepted the e-mail but before the flag
# is set. Plain check-then-act sends again on the next run. Closed by the
# Message-ID: it is derived from IDEM_KEY, which is the same on every
# attempt and run of this user's job, and the mailer accepts one message
# per Message-ID, so the resend is dropped. (IDEM_RUN_ID would not do: it
# changes on every run.)
#
# idem adds: a user whose job succeeded is skipped without touching the
# database, two copies of this script never work on one user at once, and
# a failed job is retried with backoff.
set -euo pipefail

examples=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
PATH=$examples/stand-ins:$PATH

# The job, run by idem once per user: welcome-email.sh --job STATE USER
send_welcome() {
  local state=$1 user=$2 sent email
  sent=$(db "$state/app.db" "SELECT welcome_sent FROM users WHERE id = '$user'")
  if [[ $sent == 1 ]]; then
    return 0
  fi
  email=$(db "$state/app.db" "SELECT email FROM users WHERE id = '$user'")
  mailer "$state" "<$IDEM_KEY@example.com>" "$email" "welcome e-mail"
  sleep 0.2 # the dangerous window: sent, not yet recorded
  db "$state/app.db" "UPDATE users SET welcome_sent = 1 WHERE id = '$user'"
  echo "welcome e-mail sent to $email"
}

if [[ ${1:-} == --job ]]; then
  send_welcome "$2" "$3"
  exit
fi

state=$(mkdir -p "${1:?usage: welcome-email.sh STATE_DIR}" && cd "$1" && pwd -P)
export IDEM_DB=$state/ledger.db

db "$state/app.db" "
  CREATE TABLE IF NOT EXISTS users (
    id TEXT PRIMARY KEY, email TEXT NOT NULL, welcome_sent INTEGER NOT NULL DEFAULT 0);
  INSERT OR IGNORE INTO users (id, email) VALUES
    ('ada', 'ada@example.com'), ('grace', 'grace@example.com'),
    ('alan', 'alan@example.com'), ('edsger', 'edsger@example.com'),
    ('barbara', 'barbara@example.com'), ('donald', 'donald@example.com');"

for user in $(db "$state/app.db" "SELECT id FROM users ORDER BY rowid"); do
  # --wait: a copy of this script still sending to this user is waited for.
  idem run --key "welcome-email-$user" --wait 30s -- \
    "$examples/welcome-email.sh" --job "$state" "$user"
done
