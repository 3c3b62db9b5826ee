//! `cloud-gateway`: placeholder binary; the issue "End-to-end token routing" fills it in.

fn main() -> anyhow::Result<()> {
    anyhow::bail!("cloud-gateway is not implemented yet: see the open issues")
}
