//! For tests and fuzzers of compiled survey files (feature `testing`).

/// `bytes` with the checksum their header names written again over their end, as a
/// writer of crafted files would: what they hold is then checked for itself rather than
/// refused as damaged. `None` when they have no readable header naming a checksum (a file
/// from before checksums, or no compiled survey at all), which loading refuses or takes
/// as it is anyway.
pub fn resealed(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = bytes.to_vec();
    crate::format::reseal(&mut out).then_some(out)
}
