//! MP3-like files for the ID3 extensions' tests and benchmarks: an ID3v2.3 tag (title,
//! year), the audio given, and an ID3v1 tail (title).

/// A file with a tag of `room` bytes (padded) around `audio`.
pub fn tagged(title: &str, year: &str, room: usize, audio: &[u8]) -> Vec<u8> {
    let frame = |id: &[u8], text: &str| {
        let mut f = id.to_vec();
        f.extend_from_slice(&(text.len() as u32 + 1).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0]);
        f.extend_from_slice(text.as_bytes());
        f
    };
    let mut body = [frame(b"TIT2", title), frame(b"TYER", year)].concat();
    body.resize(room, 0);
    let mut file = b"ID3\x03\0\0".to_vec();
    // The tag's size, syncsafe (7 bits a byte).
    file.extend_from_slice(&[21, 14, 7, 0].map(|shift| (room >> shift) as u8 & 0x7f));
    file.extend_from_slice(&body);
    file.extend_from_slice(audio);
    let mut v1 = vec![0u8; 128];
    v1[..3].copy_from_slice(b"TAG");
    v1[3..3 + title.len()].copy_from_slice(title.as_bytes());
    file.extend_from_slice(&v1);
    file
}
