-- The ledger refers to accounts and users, so neither is ever deleted (as on PostgreSQL,
-- where this rule replaces the ledger's foreign keys).
CREATE TRIGGER accounts_never_deleted BEFORE DELETE ON accounts
BEGIN
    SELECT RAISE(ABORT, 'accounts are never deleted: the ledger refers to them');
END;
CREATE TRIGGER users_never_deleted BEFORE DELETE ON users
BEGIN
    SELECT RAISE(ABORT, 'users are never deleted: the ledger refers to them');
END;
