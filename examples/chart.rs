//! An orchestrator's analysis step: run code in a stateful code-interpreter
//! context, and save the chart it draws.
//!
//! ```text
//! ABX_SERVER_URL=http://10.0.0.7:9000 ABX_CODE_URL=http://10.0.0.7:49999 ABX_SERVER_TOKEN=... \
//!   cargo run --example chart -- chart.png
//! ```
//!
//! The sandbox's Python needs matplotlib.

use std::error::Error;
use std::path::Path;

use abx_client::{Client, CodeClient};
use abx_wire::api::code::{CreateContextRequest, ExecuteRequest};

/// Loads data in one execution and plots it in the next (a context keeps
/// its variables), then saves the PNG the plot returns to `out`; returns
/// the chart's size in bytes.
pub async fn run(code: &CodeClient, out: &Path) -> Result<usize, Box<dyn Error + Send + Sync>> {
    let context = code.create_context(&CreateContextRequest::default()).await?;
    let load = "readings = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]\nlen(readings)";
    let loaded = code.run(&ExecuteRequest::in_context(&context.id, load)).await?;
    println!("loaded {} readings", loaded.text().unwrap_or("?"));
    let plot = "import matplotlib.pyplot as plt\n\
                plt.plot(readings, marker='o')\n\
                plt.title('readings')\n\
                plt.show()";
    let plotted = code.run(&ExecuteRequest::in_context(&context.id, plot)).await?;
    code.delete_context(&context.id).await?;
    if let Some(error) = plotted.error() {
        return Err(format!("the plot failed: {}: {}", error.name, error.value).into());
    }
    let png = plotted.png()?.ok_or("the code drew no chart")?;
    tokio::fs::write(out, &png).await?;
    Ok(png.len())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let out = std::env::args().nth(1).unwrap_or_else(|| "chart.png".into());
    let url = std::env::var("ABX_SERVER_URL").unwrap_or_else(|_| "http://127.0.0.1:9000".into());
    let code_url = std::env::var("ABX_CODE_URL").unwrap_or_else(|_| "http://127.0.0.1:49999".into());
    let client = Client::builder(&url).token(std::env::var("ABX_SERVER_TOKEN").ok()).build()?;
    let size = run(&client.code_interpreter(&code_url), Path::new(&out)).await?;
    println!("saved a {size}-byte chart to {out}");
    Ok(())
}
