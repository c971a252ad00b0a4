//! CRC-32 (IEEE 802.3), implemented here: reflected polynomial 0xEDB88320,
//! initial value and final XOR 0xFFFFFFFF — the checksum of zlib, gzip and
//! PNG, so any C reader can reproduce it with a 256-entry table. This
//! version processes eight bytes per step ("slicing by 8") so verifying a
//! few hundred megabytes of weights takes a fraction of a second.

/// CRC-32 of `bytes` (`crc32(b"123456789") == 0xCBF4_3926`).
pub fn crc32(bytes: &[u8]) -> u32 {
    Crc32::new().update(bytes).finish()
}

/// Incremental CRC-32: `Crc32::new().update(a).update(b).finish()` equals
/// `crc32` of `a` followed by `b`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Crc32(u32);

impl Crc32 {
    pub(crate) fn new() -> Crc32 {
        Crc32(!0)
    }

    pub(crate) fn update(self, bytes: &[u8]) -> Crc32 {
        let t = &TABLES;
        let mut crc = self.0;
        let (blocks, rest) = bytes.as_chunks::<8>();
        for b in blocks {
            let lo = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) ^ crc;
            let hi = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            crc = t[7][(lo & 0xFF) as usize]
                ^ t[6][((lo >> 8) & 0xFF) as usize]
                ^ t[5][((lo >> 16) & 0xFF) as usize]
                ^ t[4][(lo >> 24) as usize]
                ^ t[3][(hi & 0xFF) as usize]
                ^ t[2][((hi >> 8) & 0xFF) as usize]
                ^ t[1][((hi >> 16) & 0xFF) as usize]
                ^ t[0][(hi >> 24) as usize];
        }
        for &b in rest {
            crc = t[0][((crc ^ b as u32) & 0xFF) as usize] ^ (crc >> 8);
        }
        Crc32(crc)
    }

    pub(crate) fn finish(self) -> u32 {
        !self.0
    }
}

/// `TABLES[0]` is the classic byte table; `TABLES[k][i]` advances
/// `TABLES[k - 1][i]` by one more zero byte.
const TABLES: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain one-byte-at-a-time definition, for comparison.
    fn bytewise(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc = TABLES[0][((crc ^ b as u32) & 0xFF) as usize] ^ (crc >> 8);
        }
        !crc
    }

    #[test]
    fn known_values() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
    }

    #[test]
    fn sliced_equals_bytewise_at_every_length_and_split() {
        let data: Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in 0..data.len() {
            let d = &data[..len];
            assert_eq!(crc32(d), bytewise(d), "length {len}");
            let split = len / 3;
            let (a, b) = d.split_at(split);
            assert_eq!(Crc32::new().update(a).update(b).finish(), bytewise(d));
        }
    }
}
