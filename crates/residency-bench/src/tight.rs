//! Placeholder.
pub struct TightOptions;
pub fn parse_options(_args: &[String]) -> Result<TightOptions, String> {
    Ok(TightOptions)
}
pub fn run(_o: &TightOptions) -> std::process::ExitCode {
    std::process::ExitCode::SUCCESS
}
