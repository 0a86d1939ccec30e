//! The SQLite library called directly, for the one connection that writes the ledger on
//! a thread of its own.
//!
//! sqlx stays the driver for everything else. Its SQLite connections run each statement
//! on a worker thread of their own, copying every bound value on the way; a billed
//! request paid ~4 µs more for that than for the write itself (the ledger bench: 64
//! tasks, 7–8 µs a bill this way against 10–13 through sqlx). This is the same library
//! sqlx links (`libsqlite3-sys`, bundled), reached through a handful of calls that every
//! use below wraps safely: statements are prepared once and kept, values are bound for
//! one execution and released before it returns.

use std::ffi::{c_char, c_int, CStr, CString};
use std::path::Path;
use std::ptr::{self, NonNull};

use libsqlite3_sys as ffi;

/// A failed SQLite call: its extended result code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SQLite error {code}: {message}")]
pub struct SqliteError {
    /// The extended result code (`SQLITE_BUSY` is 5, a failed constraint 19 plus its kind).
    pub code: i32,
    /// SQLite's own words.
    pub message: String,
}

/// A value bound to one parameter for one execution.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    /// An integer.
    Int(i64),
    /// UTF-8 text.
    Text(&'a str),
    /// Bytes.
    Blob(&'a [u8]),
    /// SQL NULL.
    Null,
}

/// A statement prepared on a [`Connection`], named by its place there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prepared(usize);

/// One connection, used by one thread at a time (it may move between threads).
pub struct Connection {
    db: NonNull<ffi::sqlite3>,
    statements: Vec<NonNull<ffi::sqlite3_stmt>>,
}

// SAFETY: the connection is opened in SQLite's multi-thread mode (NOMUTEX): it may be
// used from any thread, one at a time, which `&mut self` on every call ensures.
#[allow(unsafe_code)]
unsafe impl Send for Connection {}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("statements", &self.statements.len())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Opens the existing database file `path` for reading and writing.
    pub fn open(path: &Path) -> Result<Connection, SqliteError> {
        let name = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| SqliteError {
            code: ffi::SQLITE_CANTOPEN,
            message: "the database path holds a NUL byte".to_owned(),
        })?;
        let mut db = ptr::null_mut();
        let flags =
            ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_NOMUTEX | ffi::SQLITE_OPEN_EXRESCODE;
        // SAFETY: `name` is a NUL-terminated string that outlives the call; `db` is written
        // by SQLite (a handle even on most failures, which must then be closed).
        #[allow(unsafe_code)]
        let code = unsafe { ffi::sqlite3_open_v2(name.as_ptr(), &mut db, flags, ptr::null()) };
        let Some(db) = NonNull::new(db) else {
            return Err(SqliteError {
                code,
                message: "out of memory opening the database".to_owned(),
            });
        };
        let conn = Connection {
            db,
            statements: Vec::new(),
        };
        if code != ffi::SQLITE_OK {
            return Err(conn.error(code));
        }
        Ok(conn)
    }

    /// Runs `sql` (one or more statements, no parameters), ignoring any rows.
    pub fn execute_batch(&mut self, sql: &str) -> Result<(), SqliteError> {
        let sql = CString::new(sql).map_err(|_| SqliteError {
            code: ffi::SQLITE_MISUSE,
            message: "the SQL holds a NUL byte".to_owned(),
        })?;
        // SAFETY: the handle is open; `sql` is NUL-terminated and outlives the call; no
        // callback and no error-message pointer are passed.
        #[allow(unsafe_code)]
        let code = unsafe {
            ffi::sqlite3_exec(
                self.db.as_ptr(),
                sql.as_ptr(),
                None,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        self.check(code)
    }

    /// Prepares `sql` (one statement) and keeps it for [`Connection::run`] until the
    /// connection closes.
    pub fn prepare(&mut self, sql: &str) -> Result<Prepared, SqliteError> {
        let length = c_int::try_from(sql.len()).map_err(|_| SqliteError {
            code: ffi::SQLITE_TOOBIG,
            message: "the SQL is too long".to_owned(),
        })?;
        let mut statement = ptr::null_mut();
        // SAFETY: the handle is open; `sql` is valid for `length` bytes during the call
        // (SQLite copies what it keeps); `statement` is written by SQLite.
        #[allow(unsafe_code)]
        let code = unsafe {
            ffi::sqlite3_prepare_v3(
                self.db.as_ptr(),
                sql.as_ptr().cast::<c_char>(),
                length,
                ffi::SQLITE_PREPARE_PERSISTENT,
                &mut statement,
                ptr::null_mut(),
            )
        };
        self.check(code)?;
        let statement = NonNull::new(statement).ok_or_else(|| SqliteError {
            code: ffi::SQLITE_MISUSE,
            message: "the SQL holds no statement".to_owned(),
        })?;
        self.statements.push(statement);
        Ok(Prepared(self.statements.len() - 1))
    }

    /// Runs `statement` once with `params` bound in order (`?1`, `?2`, ...), to its end,
    /// ignoring any rows; then releases the values, so none is read after this returns.
    pub fn run(&mut self, statement: Prepared, params: &[Value<'_>]) -> Result<(), SqliteError> {
        let Some(&statement) = self.statements.get(statement.0) else {
            return Err(SqliteError {
                code: ffi::SQLITE_MISUSE,
                message: "no such prepared statement on this connection".to_owned(),
            });
        };
        let outcome = self.bind_and_step(statement, params);
        // SAFETY: the statement is live (finalized only on drop). Reset ends the execution
        // and clearing drops every binding: SQLite keeps no pointer into `params`.
        #[allow(unsafe_code)]
        unsafe {
            ffi::sqlite3_reset(statement.as_ptr());
            ffi::sqlite3_clear_bindings(statement.as_ptr());
        }
        outcome
    }

    /// How many rows the last INSERT, UPDATE or DELETE run on this connection changed.
    pub fn changes(&self) -> u64 {
        // SAFETY: the handle is open; the call only reads the connection's counter.
        #[allow(unsafe_code)]
        let changes = unsafe { ffi::sqlite3_changes64(self.db.as_ptr()) };
        u64::try_from(changes).unwrap_or(0)
    }

    fn bind_and_step(
        &self,
        statement: NonNull<ffi::sqlite3_stmt>,
        params: &[Value<'_>],
    ) -> Result<(), SqliteError> {
        let statement = statement.as_ptr();
        for (index, value) in params.iter().enumerate() {
            let index = c_int::try_from(index + 1).map_err(|_| SqliteError {
                code: ffi::SQLITE_RANGE,
                message: "too many parameters".to_owned(),
            })?;
            // SAFETY: the statement is live. Text and blobs are bound without a copy
            // (SQLITE_STATIC): they are borrowed for this whole call, and `run` clears the
            // bindings before it returns. A slice's pointer is never null (an empty one
            // is dangling but read for 0 bytes), so it never reads as SQL NULL.
            #[allow(unsafe_code)]
            let code = unsafe {
                match *value {
                    Value::Int(int) => ffi::sqlite3_bind_int64(statement, index, int),
                    Value::Text(text) => ffi::sqlite3_bind_text64(
                        statement,
                        index,
                        text.as_ptr().cast::<c_char>(),
                        text.len() as u64,
                        ffi::SQLITE_STATIC(),
                        ffi::SQLITE_UTF8 as u8,
                    ),
                    Value::Blob(bytes) => ffi::sqlite3_bind_blob64(
                        statement,
                        index,
                        bytes.as_ptr().cast(),
                        bytes.len() as u64,
                        ffi::SQLITE_STATIC(),
                    ),
                    Value::Null => ffi::sqlite3_bind_null(statement, index),
                }
            };
            self.check(code)?;
        }
        loop {
            // SAFETY: the statement is live and all its parameters are bound (unbound ones
            // are NULL).
            #[allow(unsafe_code)]
            let code = unsafe { ffi::sqlite3_step(statement) };
            match code {
                ffi::SQLITE_ROW => continue,
                ffi::SQLITE_DONE => return Ok(()),
                code => return Err(self.error(code)),
            }
        }
    }

    fn check(&self, code: c_int) -> Result<(), SqliteError> {
        if code == ffi::SQLITE_OK {
            Ok(())
        } else {
            Err(self.error(code))
        }
    }

    /// The connection's last error, `code` being what the failed call returned.
    fn error(&self, code: c_int) -> SqliteError {
        // SAFETY: the handle is open; the message is NUL-terminated, owned by SQLite and
        // valid until the next call on this connection, so it is copied at once.
        #[allow(unsafe_code)]
        let (extended, message) = unsafe {
            let message = ffi::sqlite3_errmsg(self.db.as_ptr());
            let message = if message.is_null() {
                String::new()
            } else {
                CStr::from_ptr(message).to_string_lossy().into_owned()
            };
            (ffi::sqlite3_extended_errcode(self.db.as_ptr()), message)
        };
        SqliteError {
            code: if extended != 0 { extended } else { code },
            message,
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // SAFETY: every statement was prepared on this handle and is finalized once; the
        // handle is closed once, last, with none left open (so `sqlite3_close` cannot be
        // refused as busy). Closing rolls back a transaction left open.
        #[allow(unsafe_code)]
        unsafe {
            for statement in self.statements.drain(..) {
                ffi::sqlite3_finalize(statement.as_ptr());
            }
            ffi::sqlite3_close(self.db.as_ptr());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn scratch() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.db");
        std::fs::File::create(&file).unwrap();
        (dir, Connection::open(&file).unwrap())
    }

    #[tokio::test]
    async fn values_round_trip_through_a_prepared_statement() {
        use sqlx::Connection as _;
        let (dir, mut conn) = scratch();
        conn.execute_batch("CREATE TABLE t (i INTEGER, s TEXT, b BLOB, n TEXT)")
            .unwrap();
        let insert = conn.prepare("INSERT INTO t VALUES (?, ?, ?, ?)").unwrap();
        let rows = [
            (7, String::from("é\"x'"), vec![0u8, 255]),
            (8, String::new(), vec![]),
        ];
        for (i, text, bytes) in &rows {
            let params = [
                Value::Int(*i),
                Value::Text(text),
                Value::Blob(bytes),
                Value::Null,
            ];
            conn.run(insert, &params).unwrap();
        }
        drop(conn);
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let mut reader = sqlx::SqliteConnection::connect(&url).await.unwrap();
        let read: Vec<(i64, String, Vec<u8>, Option<String>)> =
            sqlx::query_as("SELECT i, s, b, n FROM t ORDER BY i")
                .fetch_all(&mut reader)
                .await
                .unwrap();
        let expected: Vec<_> = rows.into_iter().map(|(i, s, b)| (i, s, b, None)).collect();
        assert_eq!(read, expected);
    }

    #[test]
    fn a_failed_statement_says_why_and_the_connection_goes_on() {
        let (_dir, mut conn) = scratch();
        conn.execute_batch("CREATE TABLE t (x INTEGER NOT NULL)")
            .unwrap();
        let insert = conn.prepare("INSERT INTO t VALUES (?)").unwrap();
        let error = conn.run(insert, &[Value::Null]).unwrap_err();
        assert_eq!(error.code, ffi::SQLITE_CONSTRAINT_NOTNULL);
        assert!(error.message.contains("NOT NULL"), "{error}");
        conn.run(insert, &[Value::Int(1)]).unwrap();
        assert!(conn.prepare("SELEC nonsense").is_err());
        assert!(conn.run(Prepared(99), &[]).is_err());
    }

    #[test]
    fn a_missing_file_is_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("absent.db");
        let error = Connection::open(&file).unwrap_err();
        assert_eq!(error.code & 0xff, ffi::SQLITE_CANTOPEN);
        assert!(!file.exists());
    }
}
