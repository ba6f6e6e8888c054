//! The `digest` extension: a file's MD5 and SHA-256 (fingerprints on demand), computed in
//! the sandbox a piece at a time. roam hands each call the next piece and the state the
//! previous call answered (a continued conversation, as an archive listing), so a file of
//! any size is hashed in bounded calls: the state is the bytes hashed so far and both
//! hashes' chaining values (56 bytes), pieces are whole 64-byte blocks but the last.
//! Both compression functions are written out here (RFC 1321, FIPS 180-4) because the
//! crates that have them keep their state private.

use roam_ext_abi::{Reply, Request};

roam_ext_abi::export!(handle);

fn handle(req: Request) -> Reply {
    match req {
        Request::Digest {
            size,
            off,
            state,
            data,
        } => step(size, off, &state, &data).unwrap_or_else(|e| Reply::Fail(e.into())),
        _ => Reply::Fail("digest only hashes files".into()),
    }
}

/// What is carried from call to call.
struct State {
    done: u64,
    md5: [u32; 4],
    sha: [u32; 8],
}

const MD5_H: [u32; 4] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476];

impl State {
    fn decode(b: &[u8]) -> Option<State> {
        if b.is_empty() {
            return Some(State {
                done: 0,
                md5: MD5_H,
                sha: SHA_H,
            });
        }
        if b.len() != 56 {
            return None;
        }
        let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        Some(State {
            done: u64::from_le_bytes(b[..8].try_into().unwrap()),
            md5: std::array::from_fn(|i| word(8 + 4 * i)),
            sha: std::array::from_fn(|i| word(24 + 4 * i)),
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = self.done.to_le_bytes().to_vec();
        for w in self.md5.iter().chain(&self.sha) {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    fn blocks(&mut self, data: &[u8]) {
        for block in data.chunks_exact(64) {
            let block: &[u8; 64] = block.try_into().unwrap();
            md5_block(&mut self.md5, block);
            sha_block(&mut self.sha, block);
        }
    }
}

fn step(size: u64, off: u64, state: &[u8], data: &[u8]) -> Result<Reply, &'static str> {
    let mut s = State::decode(state).ok_or("a state this extension did not give")?;
    if off != s.done || off + data.len() as u64 > size {
        return Err("a piece out of order");
    }
    let last = off + data.len() as u64 == size;
    if !last && !data.len().is_multiple_of(64) {
        return Err("a piece that is not whole blocks");
    }
    let whole = data.len() / 64 * 64;
    s.blocks(&data[..whole]);
    s.done += data.len() as u64;
    if !last {
        return Ok(Reply::Bytes(s.encode()));
    }
    // Padding: 0x80, zeros, the length in bits (MD5 little-endian, SHA-256 big-endian).
    let mut tail = data[whole..].to_vec();
    tail.push(0x80);
    while tail.len() % 64 != 56 {
        tail.push(0);
    }
    let bits = size.wrapping_mul(8);
    let (mut m, mut h) = (tail.clone(), tail);
    m.extend_from_slice(&bits.to_le_bytes());
    h.extend_from_slice(&bits.to_be_bytes());
    for b in m.chunks_exact(64) {
        md5_block(&mut s.md5, b.try_into().unwrap());
    }
    for b in h.chunks_exact(64) {
        sha_block(&mut s.sha, b.try_into().unwrap());
    }
    let mut out: Vec<u8> = s.md5.iter().flat_map(|w| w.to_le_bytes()).collect();
    out.extend(s.sha.iter().flat_map(|w| w.to_be_bytes()));
    Ok(Reply::Bytes(out))
}

fn md5_block(h: &mut [u32; 4], block: &[u8; 64]) {
    const S: [u32; 16] = [7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21];
    let m: [u32; 16] =
        std::array::from_fn(|i| u32::from_le_bytes(block[4 * i..4 * i + 4].try_into().unwrap()));
    let [mut a, mut b, mut c, mut d] = *h;
    for i in 0..64 {
        let (f, g) = match i / 16 {
            0 => ((b & c) | (!b & d), i),
            1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
            2 => (b ^ c ^ d, (3 * i + 5) % 16),
            _ => (c ^ (b | !d), (7 * i) % 16),
        };
        let f = f.wrapping_add(a).wrapping_add(MD5_K[i]).wrapping_add(m[g]);
        a = d;
        d = c;
        c = b;
        b = b.wrapping_add(f.rotate_left(S[i / 16 * 4 + i % 4]));
    }
    for (x, y) in h.iter_mut().zip([a, b, c, d]) {
        *x = x.wrapping_add(y);
    }
}

fn sha_block(h: &mut [u32; 8], block: &[u8; 64]) {
    let mut w = [0u32; 64];
    for i in 0..16 {
        w[i] = u32::from_be_bytes(block[4 * i..4 * i + 4].try_into().unwrap());
    }
    for i in 16..64 {
        let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
        let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16]
            .wrapping_add(s0)
            .wrapping_add(w[i - 7])
            .wrapping_add(s1);
    }
    let mut v = *h;
    for i in 0..64 {
        let [a, b, c, d, e, f, g, hh] = v;
        let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
        let ch = (e & f) ^ (!e & g);
        let t1 = hh
            .wrapping_add(s1)
            .wrapping_add(ch)
            .wrapping_add(SHA_K[i])
            .wrapping_add(w[i]);
        let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
        let maj = (a & b) ^ (a & c) ^ (b & c);
        let t2 = s0.wrapping_add(maj);
        v = [t1.wrapping_add(t2), a, b, c, d.wrapping_add(t1), e, f, g];
    }
    for (x, y) in h.iter_mut().zip(v) {
        *x = x.wrapping_add(y);
    }
}

/// MD5's sines: floor(|sin(i + 1)| * 2^32).
const MD5_K: [u32; 64] = [
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
];

/// SHA-256's cube roots of the first 64 primes.
const SHA_K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// SHA-256's square roots of the first 8 primes.
const SHA_H: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Hashes `data` in pieces of `piece` bytes, as roam calls.
    fn digest(data: &[u8], piece: usize) -> (String, String) {
        let mut state = Vec::new();
        let mut off = 0;
        loop {
            let end = (off + piece).min(data.len());
            let Reply::Bytes(out) =
                step(data.len() as u64, off as u64, &state, &data[off..end]).unwrap()
            else {
                panic!()
            };
            if end == data.len() {
                return (hex(&out[..16]), hex(&out[16..]));
            }
            state = out;
            off = end;
        }
    }

    #[test]
    fn known_answers_in_any_pieces() {
        let (m, s) = digest(b"", 64);
        assert_eq!(m, "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(
            s,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let (m, s) = digest(b"abc", 64);
        assert_eq!(m, "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            s,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let long: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 256) as u8).collect();
        assert_eq!(digest(&long, 64), digest(&long, 4096 * 3));
        assert!(step(10, 64, &[], b"x").is_err(), "out of order");
        assert!(step(100, 0, &[], &[0; 10]).is_err(), "not whole blocks");
    }
}
