//! A compiled survey's bytes held in memory aligned for the survey's 8-byte sections,
//! so a survey reads them in place.

use crate::error::LoadError;

/// Bytes in 8-aligned memory: what [`crate::Survey::from_aligned`] loads without a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    /// `len` bytes written by `fill` straight into aligned memory: one copy from bytes
    /// held elsewhere (a JS `Uint8Array`). [`LoadError::OutOfMemory`], not an abort, when
    /// the memory can't be had (a WebAssembly page has 4 GiB at most).
    /// `len` is a `u64` as a JS length is: 2^32 bytes fit no 32-bit address space.
    pub fn filled(len: u64, fill: impl FnOnce(&mut [u8])) -> Result<AlignedBytes, LoadError> {
        let too_large = || LoadError::OutOfMemory { bytes: len };
        let len = usize::try_from(len).map_err(|_| too_large())?;
        let count = len.div_ceil(8);
        let mut words = Vec::new();
        words.try_reserve_exact(count).map_err(|_| too_large())?;
        words.resize(count, 0u64);
        fill(&mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..len]);
        Ok(AlignedBytes { words, len })
    }

    /// A copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> Result<AlignedBytes, LoadError> {
        AlignedBytes::filled(bytes.len() as u64, |into| into.copy_from_slice(bytes))
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }
}
