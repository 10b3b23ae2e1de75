//! Writes bperf's man pages, generated from its command-line definitions, into man/
//! (`make man`). tests/it/man.rs fails when man/ is not what this writes.

fn main() -> std::io::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    std::fs::create_dir_all(&dir)?;
    for (name, page) in bperf::cli::man_pages() {
        std::fs::write(dir.join(&name), page)?;
        println!("man/{name}");
    }
    Ok(())
}
