-- A bill's account and user come from an authenticated principal, and neither is ever
-- deleted, so the ledger's foreign keys could not fail; yet each bill paid for them with a
-- key-share lock on its account's row (about a third of PostgreSQL's CPU per bill). They
-- go, and the rule they leaned on is kept where it can break: deleting an account or a
-- user is refused.
ALTER TABLE ledger DROP CONSTRAINT ledger_account_id_fkey;
ALTER TABLE ledger DROP CONSTRAINT ledger_user_id_fkey;

CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% are never deleted: the ledger refers to them', TG_TABLE_NAME;
END
$$;
CREATE TRIGGER accounts_never_deleted BEFORE DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION refuse_delete();
CREATE TRIGGER users_never_deleted BEFORE DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION refuse_delete();
