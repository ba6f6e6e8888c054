//! JPEG-like files for the camera device source's tests and benchmarks: the head a camera
//! writes (Exif with the date the photo was taken), then filler for the image data.

/// SOI, APP1 Exif (big-endian TIFF: IFD0 → Exif IFD → DateTimeOriginal `date`, as
/// `2024:06:01 10:00:00`), then the start of the image data; `len` bytes in all.
pub fn photo(date: &str, len: usize) -> Vec<u8> {
    let mut t = b"MM\0\x2a\0\0\0\x08".to_vec();
    let entry = |t: &mut Vec<u8>, tag: u16, kind: u16, count: u32, value: u32| {
        t.extend_from_slice(&1u16.to_be_bytes());
        t.extend_from_slice(&tag.to_be_bytes());
        t.extend_from_slice(&kind.to_be_bytes());
        t.extend_from_slice(&count.to_be_bytes());
        t.extend_from_slice(&value.to_be_bytes());
        t.extend_from_slice(&0u32.to_be_bytes());
    };
    entry(&mut t, 0x8769, 4, 1, 26);
    entry(&mut t, 0x9003, 2, 20, 44);
    t.extend_from_slice(date.as_bytes());
    t.push(0);
    let mut j = vec![0xff, 0xd8, 0xff, 0xe1];
    j.extend_from_slice(&((t.len() + 8) as u16).to_be_bytes());
    j.extend_from_slice(b"Exif\0\0");
    j.extend_from_slice(&t);
    j.extend_from_slice(&[0xff, 0xda, 0, 2]);
    j.resize(len, 0x55);
    j
}
