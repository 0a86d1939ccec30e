//! Single sign-on: identity providers and the tokens they vouch for.

pub mod saml;
