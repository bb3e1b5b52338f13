//! Knowledge search at 10,000 chunks: a collection in a real SQLite file (sqlite-vec
//! vectors, FTS5 text) against a brute-force cosine scan of the same vectors in memory,
//! in the same run.
//!
//! `cargo bench -p agentloom-blocks --bench knowledge_search` (optimised build). Prints the
//! time to index, the file's size, and the median, 10th and 90th percentile time per query
//! for: the brute-force scan, sqlite-vec's k-nearest search, a metadata-filtered vector
//! search, keyword (BM25) search and hybrid search; and the machine's load average. The
//! vectors are pseudo-random 384-dimensional unit vectors (MiniLM's size), so the timing
//! does not depend on an embedding service; both searches must return the same top 10.

use std::time::{Duration, Instant};

use agentloom_blocks::knowledge::store::{
    EmbeddingModel, Filter, KnowledgeStore, NewChunk, NewDocument, Query, SearchMode, content_hash,
};

const CHUNKS: usize = 10_000;
const CHUNKS_PER_DOCUMENT: usize = 50;
const DIMENSIONS: usize = 384;
const QUERIES: usize = 200;
const K: usize = 10;
const WORDS: [&str; 24] = [
    "invoice", "refund", "parcel", "password", "export", "archive", "seat", "trial", "storage",
    "backup", "webhook", "token", "sync", "offline", "theme", "printer", "mobile", "import",
    "support", "licence", "profile", "network", "drive", "error",
];

/// A small deterministic generator (xorshift64*), so every run indexes the same data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    fn vector(&mut self) -> Vec<f32> {
        let mut v: Vec<f32> = (0..DIMENSIONS).map(|_| self.unit()).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        v
    }

    fn text(&mut self, words: usize) -> String {
        (0..words)
            .map(|_| WORDS[(self.next() % WORDS.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The k best by cosine similarity over every vector (the vectors are unit length, so
/// the dot product is the cosine), best first.
fn brute_force(vectors: &[Vec<f32>], query: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut scored: Vec<(usize, f32)> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| (i, v.iter().zip(query).map(|(a, b)| a * b).sum()))
        .collect();
    scored.select_nth_unstable_by(k, |a, b| b.1.total_cmp(&a.1));
    scored.truncate(k);
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    scored
}

fn percentiles(mut times: Vec<Duration>) -> (Duration, Duration, Duration) {
    times.sort();
    let at = |p: usize| times[(times.len() - 1) * p / 100];
    (at(50), at(10), at(90))
}

fn report(name: &str, times: Vec<Duration>) {
    let (median, p10, p90) = percentiles(times);
    println!(
        "{name:<34} median {:>9.3} ms   p10 {:>9.3} ms   p90 {:>9.3} ms",
        median.as_secs_f64() * 1e3,
        p10.as_secs_f64() * 1e3,
        p90.as_secs_f64() * 1e3
    );
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "not known on this system".to_owned())
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bench.sqlite");
    let model = EmbeddingModel {
        name: "bench-384".to_owned(),
        dimensions: DIMENSIONS,
    };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let vectors: Vec<Vec<f32>> = (0..CHUNKS).map(|_| rng.vector()).collect();
    let texts: Vec<String> = (0..CHUNKS).map(|_| rng.text(40)).collect();

    println!("load average before: {}", load_average());
    let mut store = KnowledgeStore::open(&path).expect("store");
    store
        .ensure_collection("bench", &model)
        .expect("collection");
    let started = Instant::now();
    for (d, range) in (0..CHUNKS).step_by(CHUNKS_PER_DOCUMENT).enumerate() {
        let chunks: Vec<NewChunk> = (range..range + CHUNKS_PER_DOCUMENT)
            .map(|i| NewChunk {
                text: texts[i].clone(),
                vector: vectors[i].clone(),
                start: 0,
                end: texts[i].len(),
                metadata: serde_json::json!({"i": i, "shard": i % 10})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            })
            .collect();
        let document = NewDocument {
            source: format!("doc-{d}"),
            content_hash: content_hash(chunks.iter().map(|c| (c.text.as_str(), c.start, c.end))),
            metadata: serde_json::Map::new(),
            chunks,
        };
        store
            .add_document("bench", &model, &document)
            .expect("added");
    }
    let indexing = started.elapsed();
    drop(store);
    let store = KnowledgeStore::open(&path).expect("store");
    let size: u64 = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "{CHUNKS} chunks of {DIMENSIONS} dimensions indexed in {:.2} s; store file (with WAL) {:.1} MiB ({:.0} bytes per chunk)",
        indexing.as_secs_f64(),
        size as f64 / 1048576.0,
        size as f64 / CHUNKS as f64
    );

    let queries: Vec<(Vec<f32>, String)> =
        (0..QUERIES).map(|_| (rng.vector(), rng.text(3))).collect();
    let query = |vector: &[f32], text: &str, mode: SearchMode, filter: Filter| Query {
        text: Some(text.to_owned()),
        vector: Some((model.clone(), vector.to_vec())),
        k: K,
        filter,
        mode,
    };
    // Warm both up once.
    let _ = brute_force(&vectors, &queries[0].0, K);
    let _ = store.search(
        "bench",
        &query(&queries[0].0, "", SearchMode::Vector, Filter::default()),
    );

    let mut brute = Vec::new();
    let mut vec0 = Vec::new();
    let mut filtered = Vec::new();
    let mut keyword = Vec::new();
    let mut hybrid = Vec::new();
    for (vector, text) in &queries {
        let t = Instant::now();
        let expected = brute_force(&vectors, vector, K);
        brute.push(t.elapsed());

        let t = Instant::now();
        let hits = store
            .search(
                "bench",
                &query(vector, text, SearchMode::Vector, Filter::default()),
            )
            .expect("search");
        vec0.push(t.elapsed());
        let found: Vec<i64> = hits
            .iter()
            .filter_map(|h| h.metadata["i"].as_i64())
            .collect();
        let wanted: Vec<i64> = expected.iter().map(|(i, _)| *i as i64).collect();
        assert_eq!(
            found, wanted,
            "sqlite-vec and the brute-force scan disagree"
        );

        let shard = Filter(vec![("shard".to_owned(), serde_json::json!(3))]);
        let t = Instant::now();
        let hits = store
            .search("bench", &query(vector, text, SearchMode::Vector, shard))
            .expect("search");
        filtered.push(t.elapsed());
        assert!(hits.iter().all(|h| h.metadata["shard"] == 3));

        let t = Instant::now();
        store
            .search(
                "bench",
                &query(vector, text, SearchMode::Keyword, Filter::default()),
            )
            .expect("search");
        keyword.push(t.elapsed());

        let t = Instant::now();
        store
            .search(
                "bench",
                &query(vector, text, SearchMode::Hybrid, Filter::default()),
            )
            .expect("search");
        hybrid.push(t.elapsed());
    }
    println!("{QUERIES} queries, top {K}:");
    report("brute-force cosine scan (memory)", brute);
    report("sqlite-vec k-nearest (file)", vec0);
    report("vector, filtered to 1/10 (file)", filtered);
    report("keyword BM25 (file)", keyword);
    report("hybrid, reciprocal rank (file)", hybrid);
    println!("load average after: {}", load_average());
}
