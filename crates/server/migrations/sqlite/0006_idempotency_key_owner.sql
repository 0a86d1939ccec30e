-- Which request holds an unanswered key (a random token of its reservation): the bill
-- keeps its answer only while its own request still holds the key, and a request gives
-- back only its own, so a key taken over from a request judged abandoned is never billed
-- twice. Rows from before have none, and are never claimed by a bill.
ALTER TABLE idempotency_keys ADD COLUMN owner TEXT;
