//! Who a request is made for: an account, with its grants, and the credential that
//! established it.

use std::sync::Arc;

use crate::grants::Grants;
use crate::store::accounts::AccountLimits;
use crate::store::ledger::Caller;

/// How a principal proved who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// An API key (its id).
    Key(Arc<str>),
    /// An app user's session (the user's row id and name).
    User {
        /// Row id.
        id: i64,
        /// Sign-in name.
        username: Arc<str>,
    },
    /// A bearer token an identity provider vouched for.
    Token {
        /// The identity provider's configured name.
        idp: Arc<str>,
        /// The token's subject.
        subject: Arc<str>,
    },
}

/// An authenticated caller: everything entitlement and billing need.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The account's id (billed).
    pub account_id: i64,
    /// The account's name.
    pub account: Arc<str>,
    /// What the account may query.
    pub grants: Grants,
    /// The account's request rate and daily quota.
    pub limits: AccountLimits,
    /// The key or user behind the call.
    pub credential: Credential,
}

impl Principal {
    /// Who the ledger records as having made a call.
    pub fn caller(&self) -> Caller {
        match &self.credential {
            Credential::Key(id) => Caller::Key(Arc::clone(id)),
            Credential::User { id, .. } => Caller::User(*id),
            Credential::Token { idp, subject } => Caller::Token {
                idp: Arc::clone(idp),
                subject: Arc::clone(subject),
            },
        }
    }
}
