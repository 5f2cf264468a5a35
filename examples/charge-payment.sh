#!/usr/bin/env bash
# charge-payment: charge each order once, however often this is killed and
# run again.
#
#   examples/charge-payment.sh STATE_DIR
#
# The job charges the order at the payment gateway, then marks it paid.
# The window: a kill after the gateway accepted the charge but before the
# order is marked paid. A retry would charge the card again. Closed by the
# gateway's Idempotency-Key: the job passes IDEM_KEY, which is the same on
# every attempt and run of this order's job, and the gateway answers a key
# it has seen with the first charge instead of making a new one; the job
# then records that charge's id on the order as if it had made it.
#
# idem adds: the key itself, stable across retries and crashes; a paid
# order's job is skipped without asking the gateway; two copies of this
# script never charge one order at once; a failed job is retried with
# backoff.
set -euo pipefail

examples=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
PATH=$examples/stand-ins:$PATH

# The job, run by idem once per order: charge-payment.sh --job STATE ORDER
charge_order() {
  local state=$1 order=$2 paid amount charge
  paid=$(db "$state/app.db" "SELECT paid FROM orders WHERE id = '$order'")
  if [[ $paid == 1 ]]; then
    return 0
  fi
  amount=$(db "$state/app.db" "SELECT amount_cents FROM orders WHERE id = '$order'")
  charge=$(gateway "$state" "$IDEM_KEY" "$order" "$amount")
  sleep 0.2 # the dangerous window: charged, not yet recorded
  db "$state/app.db" "UPDATE orders SET paid = 1, charge_id = '$charge' WHERE id = '$order'"
  echo "$order paid: $charge"
}

if [[ ${1:-} == --job ]]; then
  charge_order "$2" "$3"
  exit
fi

state=$(mkdir -p "${1:?usage: charge-payment.sh STATE_DIR}" && cd "$1" && pwd -P)
export IDEM_DB=$state/ledger.db

db "$state/app.db" "
  CREATE TABLE IF NOT EXISTS orders (
    id TEXT PRIMARY KEY, amount_cents INTEGER NOT NULL,
    paid INTEGER NOT NULL DEFAULT 0, charge_id TEXT);
  INSERT OR IGNORE INTO orders (id, amount_cents) VALUES
    ('order-1001', 1250), ('order-1002', 4999), ('order-1003', 300),
    ('order-1004', 1250), ('order-1005', 12000), ('order-1006', 75);"

for order in $(db "$state/app.db" "SELECT id FROM orders ORDER BY rowid"); do
  # --wait: a copy of this script still charging this order is waited for.
  idem run --key "charge-payment-$order" --wait 30s -- \
    "$examples/charge-payment.sh" --job "$state" "$order"
done
