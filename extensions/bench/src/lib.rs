//! The `bench` extension: the computations of Small & Seltzer's tables, as `Compute` ops.
//! `noop` (upcall cost: answers an empty reply), `md5` (Table 5: digest of the data) and `ld`
//! (Table 6, logical disk: where in the log each written block goes).

use roam_ext_abi::{Reply, Request};

roam_ext_abi::export!(handle);

fn handle(req: Request) -> Reply {
    match req {
        Request::Compute { op, data } => match op.as_str() {
            "noop" => Reply::Bytes(Vec::new()),
            "md5" => Reply::Bytes(md5::compute(&data).0.to_vec()),
            "ld" => Reply::Bytes(log_structured(&data)),
            _ => Reply::Fail(format!("unknown op {op}")),
        },
        _ => Reply::Fail("bench only computes".into()),
    }
}

/// Places writes in a log-structured disk: `data` is the log head (u32) then the logical blocks
/// written (u32 each); the answer is each write's physical block, in order. Every 256th block
/// of the log is a segment summary, and blocks below 1,024 hold the checkpoint region.
fn log_structured(data: &[u8]) -> Vec<u8> {
    let mut words = data
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    let head = words.next().unwrap_or(0);
    words
        .enumerate()
        .flat_map(|(i, _logical)| {
            let pos = head + i as u32;
            (1024 + pos + pos / 255 + 1).to_le_bytes()
        })
        .collect()
}
