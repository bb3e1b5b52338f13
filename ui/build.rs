//! On Windows, agentloom.exe carries its icon and a version resource (the product name and
//! version Explorer's Properties and the installer show). Nothing is done for other targets.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../assets/icons/agentloom.ico");
    // The target's system, not the one this script is built for (cross-builds).
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("windows") {
        return;
    }
    let mut resource = winresource::WindowsResource::new();
    resource
        .set_icon("../assets/icons/agentloom.ico")
        .set("ProductName", "Agentloom")
        .set("FileDescription", "Agentloom")
        .set("OriginalFilename", "agentloom.exe")
        .set("InternalName", "agentloom")
        .set("CompanyName", "Agentloom developers")
        .set("LegalCopyright", "MIT OR Apache-2.0");
    if let Err(e) = resource.compile() {
        // The resource compiler is missing or failed: say which and what to install.
        panic!(
            "agentloom.exe's icon and version resource could not be compiled ({e}); cross-builds need x86_64-w64-mingw32-windres (Debian: apt-get install binutils-mingw-w64-x86-64)"
        );
    }
}
