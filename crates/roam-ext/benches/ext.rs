//! The extension benchmarks of docs/BENCHMARKS.md, one markdown table each, per technology:
//! Small & Seltzer Table 1 (upcall cost), Table 2 (64-entry hot-list eviction beside the
//! `acl` access decision), Table 5 (MD5 of 1 MB beside the `digest` extension's MD5 and
//! SHA-256), Table 6 (logical disk, 262,144 writes), and Sprockets Fig. 2 (the Radiohead
//! transducer over 10,000 files, all / none matching, and the `camera` device source listing
//! 1,000 photos) and Fig. 3 (conflict resolution over 100 files: the resolver's helper rounds
//! and its merge), with the break-even against a remote fetch. Run with
//! `cargo bench -p roam-ext --bench ext [-- TABLE...]` (release build).

mod common;

use common::per_call;
use roam_ext::abi::{Candidate, SourceFile};
use roam_ext::resolve::{self, Versions};
use roam_ext::{query, Extension, Limits, Technology};
use std::time::{Duration, Instant};

fn load(name: &str, tech: Technology) -> Extension {
    Extension::load(
        &roam_testkit::ext::extensions(),
        name,
        tech,
        Limits::default(),
    )
    .expect("load extension")
}

/// CPU time of this thread plus that of the processes it has reaped.
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills one rusage, which `ru` is.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32) + tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time per call of extension `name` under `tech` doing nothing (median of 3 rounds of
/// `n` calls), in every process it takes: this thread, and the children of fork and worker
/// (each round loads the extension and drops it, reaping its worker, before the clock
/// stops). Unlike wall time, other programs' turns on a shared machine do not inflate it.
fn cpu_per_call(name: &str, tech: Technology, n: usize) -> Duration {
    let mut times: Vec<Duration> = (0..3)
        .map(|_| {
            let ext = load(name, tech);
            let t = cpu_now();
            (0..n).for_each(|_| drop(ext.compute("noop", b"").unwrap()));
            drop(ext);
            (cpu_now() - t) / n as u32
        })
        .collect();
    times.sort();
    times[1]
}

fn us(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e6)
}

/// Calls per timing round: forks are slow, the rest fast.
fn calls(tech: Technology, fast: usize) -> usize {
    match tech {
        Technology::Fork => fast / 20,
        Technology::Pulley => fast / 2,
        _ => fast,
    }
}

fn table1_upcall() -> Duration {
    println!("\n### Upcall cost (Small & Seltzer Table 1): a call that does nothing\n");
    println!("| technology | µs per call | added over native | CPU µs per call (all processes) |");
    println!("|---|---:|---:|---:|");
    let mut native = Duration::ZERO;
    let mut wasm = Duration::ZERO;
    for tech in Technology::all().into_iter().rev() {
        let ext = load("bench", tech);
        let mut noop = || drop(ext.compute("noop", b"").unwrap());
        let t = per_call(calls(tech, 20_000), 5, &mut noop);
        let cpu = us(cpu_per_call("bench", tech, calls(tech, 2_000)));
        if tech == Technology::Native {
            native = t;
        }
        if tech == Technology::Wasm {
            wasm = t;
        }
        println!(
            "| {tech} | {} | {} | {cpu} |",
            us(t),
            us(t.saturating_sub(native))
        );
    }
    wasm
}

fn table5_md5() {
    println!("\n### MD5 of 1 MB (Small & Seltzer Table 5)\n");
    println!("The bench extension's MD5 in one call; the `digest` extension's MD5 and SHA-256");
    println!("together, in 256 KiB pieces (4 calls, the state carried between them).\n");
    println!("| technology | ms per MD5 | x native | ms per MD5 + SHA-256 (digest) | x native |");
    println!("|---|---:|---:|---:|---:|");
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let (mut native, mut native_sums) = (Duration::ZERO, Duration::ZERO);
    for tech in Technology::all().into_iter().rev() {
        let runs = if tech == Technology::Pulley { 2 } else { 20 };
        let ext = load("bench", tech);
        let t = per_call(runs, 5, || drop(ext.compute("md5", &data).unwrap()));
        let digest = load("digest", tech);
        let mut read = |off: u64, len: u64| Ok(data[off as usize..(off + len) as usize].to_vec());
        let sums = per_call(runs, 5, || {
            assert!(roam_ext::digest::digest(&digest, data.len() as u64, &mut read).is_ok())
        });
        if tech == Technology::Native {
            (native, native_sums) = (t, sums);
        }
        println!(
            "| {tech} | {:.3} | {:.2} | {:.3} | {:.2} |",
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() / native.as_secs_f64(),
            sums.as_secs_f64() * 1e3,
            sums.as_secs_f64() / native_sums.as_secs_f64()
        );
    }
}

fn table2_hotlist() {
    println!("\n### Black-box decisions (Small & Seltzer Table 2)\n");
    println!("Hot-list eviction among 64 candidates; the `acl` access decision for one URL");
    println!("against 8 rules (the last one decides).\n");
    println!("| technology | µs per eviction decision | µs per access decision |");
    println!("|---|---:|---:|");
    let candidates: Vec<Candidate> = (0..64)
        .map(|i| Candidate {
            name: format!("/http/host/data/file{i:02}.{}", ["so", "txt"][i % 2]),
            size: 4096,
            last_use: 1000 - i as u64,
        })
        .collect();
    let hot = vec![".so".to_string(), "/http/host/data/file63.txt".to_string()];
    let rules: Vec<(String, String)> = (0..7)
        .map(|i| ("deny".to_string(), format!("dav://host/private{i}/*")))
        .chain([("allow".to_string(), "*.txt".to_string())])
        .collect();
    for tech in Technology::all().into_iter().rev() {
        let ext = load("hotlist", tech);
        let evict = per_call(calls(tech, 5_000), 5, || {
            assert_eq!(
                roam_ext::policy::choose_victim(&ext, &hot, &candidates).unwrap(),
                61
            );
        });
        let acl = load("acl", tech);
        let mut nothing = |_, _, _| Err(std::io::Error::other("reads no file"));
        let access = per_call(calls(tech, 5_000), 5, || {
            let url = "dav://host/public/notes.txt";
            assert!(query::matches(&acl, url, &rules, 0, &mut nothing).unwrap());
        });
        println!("| {tech} | {} | {} |", us(evict), us(access));
    }
}

fn table6_logical_disk() {
    println!("\n### Logical disk, 262,144 block writes (Small & Seltzer Table 6)\n");
    println!("Each write asks the extension to map a logical block to its place in the log");
    println!("(one upcall per write); the batched column maps all writes in one call.\n");
    println!("| technology | s, one upcall per write | s, one batched call |");
    println!("|---|---:|---:|");
    const WRITES: u32 = 262_144;
    // The log head, then the logical blocks written (scattered over 256 MiB of 4 KiB blocks).
    let batch: Vec<u8> = std::iter::once(0)
        .chain((0..WRITES).map(|i| i.wrapping_mul(40_503) % 65_536))
        .flat_map(u32::to_le_bytes)
        .collect();
    for tech in Technology::all().into_iter().rev() {
        let ext = load("bench", tech);
        // 262,144 forks take minutes: fork measures 4,096 writes and scales.
        let n = if tech == Technology::Fork {
            4096
        } else {
            WRITES as usize
        };
        let mut head = 0u32;
        let per_write = per_call(n, 1, || {
            let one: Vec<u8> = head
                .to_le_bytes()
                .into_iter()
                .chain(batch[4..8].iter().copied())
                .collect();
            assert_eq!(ext.compute("ld", &one).unwrap().len(), 4);
            head += 1;
        }) * WRITES;
        let batched = per_call(1, 3, || {
            assert_eq!(
                ext.compute("ld", &batch).unwrap().len(),
                WRITES as usize * 4
            )
        });
        println!(
            "| {tech} | {:.3} | {:.3} |",
            per_write.as_secs_f64(),
            batched.as_secs_f64()
        );
    }
}

/// 10,000 in-memory MP3 tags (ID3v1 tail of a 3 MB file) by `artist`.
fn transducer_run(ext: &Extension, artist: &str) -> Duration {
    let size = 3u64 << 20;
    let mut tail = vec![0u8; 128];
    tail[..3].copy_from_slice(b"TAG");
    tail[33..33 + artist.len()].copy_from_slice(artist.as_bytes());
    let args = [("artist".to_string(), "Radiohead".to_string())];
    let t = Instant::now();
    let mut matched = 0;
    for i in 0..10_000 {
        let mut fetch = |_f: u8, off: u64, len: u32| {
            Ok(if off == size - 128 {
                tail.clone()
            } else {
                vec![0u8; len as usize]
            })
        };
        matched +=
            usize::from(query::matches(ext, &format!("{i}.mp3"), &args, size, &mut fetch).unwrap());
    }
    assert_eq!(matched, if artist == "Radiohead" { 10_000 } else { 0 });
    t.elapsed()
}

fn fig2_transducer() -> (Duration, Duration) {
    println!("\n### Radiohead transducer over 10,000 files (Sprockets Fig. 2)\n");
    println!("| technology | s, all match | s, none match |");
    println!("|---|---:|---:|");
    let (mut wasm, mut fork) = (Duration::ZERO, Duration::ZERO);
    for tech in Technology::all() {
        let ext = load("id3", tech);
        let (all, none) = (
            transducer_run(&ext, "Radiohead"),
            transducer_run(&ext, "Portishead"),
        );
        match tech {
            Technology::Wasm => wasm = all,
            Technology::Fork => fork = all,
            _ => {}
        }
        println!(
            "| {tech} | {:.3} | {:.3} |",
            all.as_secs_f64(),
            none.as_secs_f64()
        );
    }
    (wasm, fork)
}

/// The `camera` device source lists 1,000 in-memory photos (a 4 KiB head each, 48 per
/// listing step) into folders by day.
fn fig2_camera() {
    println!("\n### Camera device source, 1,000 photos (beside Sprockets Fig. 2)\n");
    println!("| technology | ms for the listing | µs per photo |");
    println!("|---|---:|---:|");
    const PHOTOS: usize = 1000;
    let days = ["2024:06:01 10:00:00", "2024:06:02 11:00:00"];
    let photos: Vec<Vec<u8>> = (0..PHOTOS)
        .map(|i| roam_testkit::jpeg::photo(days[i % 2], 8192))
        .collect();
    let files: Vec<SourceFile> = (0..PHOTOS)
        .map(|i| SourceFile {
            path: format!("DCIM/IMG_{i:04}.JPG"),
            size: 8192,
            mtime: 5,
        })
        .collect();
    for tech in Technology::all() {
        let ext = load("camera", tech);
        let t = per_call(1, 3, || {
            let mut fetch = |f: u32, off: u64, len: u32| {
                Ok(photos[f as usize][off as usize..(off + u64::from(len)) as usize].to_vec())
            };
            let tree = roam_ext::source::list(&ext, &files, &mut fetch).unwrap();
            assert_eq!(tree.extents.len(), PHOTOS);
        });
        println!(
            "| {tech} | {:.2} | {:.2} |",
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() * 1e6 / PHOTOS as f64
        );
    }
}

/// An MP3-like file of 3 MB: an ID3v2.3 tag (title, year), audio, an ID3v1 tail (title).
fn mp3(title: &str, year: &str) -> Vec<u8> {
    roam_testkit::mp3::tagged(title, year, 512, &vec![0x55; 3 << 20])
}

/// A 200-line text file with lines `changed` rewritten by `who`.
fn text(changed: &[usize], who: &str) -> Vec<u8> {
    (0..200)
        .map(|i| match changed.contains(&i) {
            true => format!("line {i} changed by {who}\n"),
            false => format!("line {i} of the original text\n"),
        })
        .collect::<String>()
        .into_bytes()
}

/// Resolves 100 conflicts of `versions` in memory with `ext`; (time, calls per file).
fn resolve_run(ext: &Extension, versions: [&[u8]; 3]) -> (Duration, usize) {
    let [base, local, remote] = versions.map(|v| v.len() as u64);
    let sizes = Versions {
        base,
        local,
        remote,
    };
    let mut calls = 0;
    let t = Instant::now();
    for _ in 0..100 {
        let mut fetch = |f: u8, off: u64, len: u32| {
            calls += 1;
            Ok(versions[usize::from(f)][off as usize..off as usize + len as usize].to_vec())
        };
        let patch = resolve::resolve(ext, "f", sizes, &mut fetch).unwrap();
        assert!(!patch.is_empty());
    }
    (t.elapsed(), calls / 100)
}

fn fig3_resolvers() {
    println!("\n### Conflict resolution over 100 files (Sprockets Fig. 3)\n");
    println!("Per file, the resolver's helper rounds (`Need`: ranges of the three versions)");
    println!("and its merge (`Patch`), in memory; ms for 100 files.\n");
    println!("| technology | id3merge, 3 MB MP3s (ms) | merge3, 200-line texts (ms) |");
    println!("|---|---:|---:|");
    let songs = [
        mp3("Song", "1999"),
        mp3("Better", "1999"),
        mp3("Song", "2001"),
    ];
    let texts = [text(&[], ""), text(&[10, 150], "me"), text(&[80], "them")];
    let (mut id3_rounds, mut text_rounds) = (0, 0);
    for tech in Technology::all() {
        let id3 = resolve_run(&load("id3merge", tech), [&songs[0], &songs[1], &songs[2]]);
        let merge3 = resolve_run(&load("merge3", tech), [&texts[0], &texts[1], &texts[2]]);
        (id3_rounds, text_rounds) = (id3.1, merge3.1);
        println!(
            "| {tech} | {:.2} | {:.2} |",
            id3.0.as_secs_f64() * 1e3,
            merge3.0.as_secs_f64() * 1e3
        );
    }
    println!("\nRanges fetched per file: id3merge {id3_rounds}, merge3 {text_rounds}.");
}

/// One 128-byte range GET from a loopback nginx: the cheapest remote fetch there is.
fn remote_fetch_cost() -> Duration {
    use std::io::{Read, Write};
    let scratch = roam_testkit::Scratch::new("ext-bench");
    roam_testkit::write_file(&scratch.join("www/f"), &vec![7u8; 1 << 20], 0o644);
    let server = roam_testkit::Server::nginx(&scratch.join("www"), &scratch.join("run"));
    let mut conn = std::net::TcpStream::connect(server.authority()).unwrap();
    let req = "GET /f HTTP/1.1\r\nHost: x\r\nRange: bytes=1000-1127\r\n\r\n";
    let mut buf = vec![0u8; 4096];
    per_call(200, 5, || {
        conn.write_all(req.as_bytes()).unwrap();
        let mut got = 0;
        while !buf[..got].ends_with(&[7u8; 128]) {
            got += conn.read(&mut buf[got..]).unwrap();
        }
    })
}

/// Whether the table `name` was asked for: `cargo bench -p roam-ext --bench ext -- NAME...`
/// runs only those (upcall, hotlist, md5, ld, transducer, camera, fig3); no names run them
/// all.
fn wanted(name: &str) -> bool {
    let asked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    asked.is_empty() || asked.iter().any(|a| a == name)
}

fn main() {
    if wanted("upcall") {
        let wasm_call = table1_upcall();
        break_even(wasm_call);
    }
    if wanted("hotlist") {
        table2_hotlist();
    }
    if wanted("md5") {
        table5_md5();
    }
    if wanted("ld") {
        table6_logical_disk();
    }
    if wanted("transducer") {
        let (wasm, fork) = fig2_transducer();
        println!(
            "\nTransducer, fork / wasm: {:.1}x",
            fork.as_secs_f64() / wasm.as_secs_f64()
        );
    }
    if wanted("camera") {
        fig2_camera();
    }
    if wanted("fig3") {
        fig3_resolvers();
    }
}

/// How many wasm calls one remote fetch pays for.
fn break_even(wasm_call: Duration) {
    let fetch = remote_fetch_cost();
    println!("\n### Break-even against a remote fetch\n");
    println!("| remote fetch | µs | wasm calls it pays for |");
    println!("|---|---:|---:|");
    println!(
        "| 128-byte range GET, loopback nginx | {} | {:.1} |",
        us(fetch),
        fetch.as_secs_f64() / wasm_call.as_secs_f64()
    );
    let wan = Duration::from_millis(20);
    println!(
        "| the same over a 20 ms round trip | {} | {:.1} |",
        us(wan),
        wan.as_secs_f64() / wasm_call.as_secs_f64()
    );
}
