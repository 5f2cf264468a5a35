#!/usr/bin/env bash
# create-invoice: create the invoice for each (order, month) once, however
# often this is killed and run again.
#
#   examples/create-invoice.sh STATE_DIR
#
# The job inserts the invoice into the billing database, whose UNIQUE
# (order_id, month) constraint refuses a second one; the job takes that
# refusal to mean "already done" and succeeds.
# The window: a kill after the invoice row is committed but before idem
# records the job's success (or, in a real job, before it goes on to mail
# the invoice). The next run inserts again. Closed by the constraint: the
# database, not the job, decides in one transaction whether the invoice
# exists, so no kill can slip between a check and the insert.
#
# idem adds: a done (order, month) is skipped without a round trip to the
# database; two copies never work on one invoice at once; a failure other
# than the duplicate (the database busy or down) is retried with backoff.
# In a crontab, `--key "create-invoice-$order-{month}"` makes the month part
# of the key by itself.
#
# Fencing: each invoice row keeps the IDEM_FENCE of the claim that wrote it,
# and a later change of the invoice applies only for a larger fence
# (`UPDATE invoices SET ... WHERE id = ? AND fence < $IDEM_FENCE`), so a
# run that lost its claim (a frozen host whose lease ran out) can never
# overwrite what the newer claim wrote. An HTTP API takes it as a header
# beside the Idempotency-Key.
set -euo pipefail

examples=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
PATH=$examples/stand-ins:$PATH

# The job, run by idem once per invoice: create-invoice.sh --job STATE ORDER MONTH
create_invoice() {
  local state=$1 order=$2 month=$3 error
  if error=$(db "$state/billing.db" "
    INSERT INTO invoices (order_id, month, amount_cents, fence)
      SELECT '$order', '$month', amount_cents, ${IDEM_FENCE:?run me through idem}
      FROM plans WHERE order_id = '$order';" 2>&1)
  then
    echo "invoice created for $order, $month"
  elif [[ $error == *"UNIQUE constraint failed"* ]]; then
    echo "invoice for $order, $month already exists"
  else
    echo "$error" >&2
    return 1
  fi
  sleep 0.2 # the dangerous window: inserted, not yet recorded
}

if [[ ${1:-} == --job ]]; then
  create_invoice "$2" "$3" "$4"
  exit
fi

state=$(mkdir -p "${1:?usage: create-invoice.sh STATE_DIR}" && cd "$1" && pwd -P)
export IDEM_DB=$state/ledger.db

# Subscriptions and their invoices; each invoice inserted is one effect.
db "$state/billing.db" "
  CREATE TABLE IF NOT EXISTS plans (order_id TEXT PRIMARY KEY, amount_cents INTEGER NOT NULL);
  CREATE TABLE IF NOT EXISTS invoices (
    id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, month TEXT NOT NULL,
    amount_cents INTEGER NOT NULL, fence INTEGER NOT NULL, UNIQUE (order_id, month));
  CREATE TABLE IF NOT EXISTS effect_log (seq INTEGER PRIMARY KEY, line TEXT NOT NULL);
  CREATE TRIGGER IF NOT EXISTS invoiced AFTER INSERT ON invoices BEGIN
    INSERT INTO effect_log (line)
      VALUES ('invoice for ' || NEW.order_id || ', ' || NEW.month);
  END;
  INSERT OR IGNORE INTO plans VALUES
    ('order-2001', 990), ('order-2002', 1990), ('order-2003', 4990);"

# A backfill of two months, oldest first.
for month in 2026-01 2026-02; do
  for order in $(db "$state/billing.db" "SELECT order_id FROM plans ORDER BY rowid"); do
    idem run --key "create-invoice-$order-$month" --wait 30s -- \
      "$examples/create-invoice.sh" --job "$state" "$order" "$month"
  done
done
