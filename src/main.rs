fn main() -> std::process::ExitCode {
    lockrun::main()
}
