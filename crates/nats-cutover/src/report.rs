//! The self-contained HTML report of a demo or run: replaced by the full
//! timeline report.

use std::path::Path;

pub fn write(path: &Path, o: &cutover_app::scenario::Outcome) -> std::io::Result<()> {
    let data = serde_json::to_string(o).unwrap_or_default().replace("</", "<\\/");
    std::fs::write(path, format!("<!doctype html><meta charset=utf-8><title>nats-cutover report</title><script id=data type=application/json>{data}</script><pre id=out></pre><script>document.getElementById('out').textContent=JSON.stringify(JSON.parse(document.getElementById('data').textContent),null,2)</script>"))
}
