//! `update_node`: a node's authority re-declares its hardware and announces the endpoint where
//! its keeper publishes what it can take and why it skips tasks (PROTOCOL §2, node endpoint).
use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, events::NodeUpdated, state::*};

/// Arguments of `update_node`.
#[derive(AnchorSerialize, AnchorDeserialize, Clone)]
pub struct UpdateNodeArgs {
    /// Declared hardware (a provider still meets the market's minimum).
    pub hardware: Hardware,
    /// The keeper's public base URL (`http(s)://…`, at most [`MAX_ENDPOINT_LEN`] printable
    /// ASCII bytes); empty: none.
    pub endpoint: String,
}

#[derive(Accounts)]
pub struct UpdateNode<'info> {
    #[account(seeds = [SEED_MARKET, &market.id.to_le_bytes()], bump = market.bump)]
    pub market: Account<'info, Market>,
    #[account(
        mut, seeds = [SEED_NODE, authority.key().as_ref()], bump = node.bump,
        has_one = authority @ MarketError::WrongAuthority,
        has_one = market @ MarketError::WrongMarket,
    )]
    pub node: Account<'info, Node>,
    pub authority: Signer<'info>,
}

impl UpdateNode<'_> {
    /// A provider's hardware meets the market's minimum; the endpoint is empty or an http(s)
    /// URL that fits the node account.
    pub fn validate(&self, args: &UpdateNodeArgs) -> Result<()> {
        if self.node.has(ROLE_PROVIDER) {
            require!(
                args.hardware.gflops >= self.market.min_gflops
                    && args.hardware.memory_gb >= self.market.min_memory_gb,
                MarketError::HardwareBelowMarketMinimum
            );
        }
        require!(
            endpoint_ok(args.endpoint.as_bytes()),
            MarketError::EndpointInvalid
        );
        Ok(())
    }
}

/// Empty, or `http://` / `https://` and a host, at most [`MAX_ENDPOINT_LEN`] bytes of printable
/// ASCII without spaces, and no user info, query or fragment (`@`, `?`, `#`, `\`): a base URL
/// clients append paths to, which cannot point them at another host's query.
pub fn endpoint_ok(e: &[u8]) -> bool {
    let rest = e
        .strip_prefix(b"http://")
        .or_else(|| e.strip_prefix(b"https://"));
    e.is_empty()
        || (e.len() <= MAX_ENDPOINT_LEN
            && rest.is_some_and(|r| !r.is_empty() && r[0] != b'/')
            && e.iter()
                .all(|b| b.is_ascii_graphic() && !b"@?#\\".contains(b)))
}

pub fn handler(ctx: Context<UpdateNode>, args: UpdateNodeArgs) -> Result<()> {
    let node = &mut ctx.accounts.node;
    node.hardware = args.hardware;
    node.set_endpoint(args.endpoint.as_bytes());
    emit!(NodeUpdated {
        node: node.key(),
        gflops: args.hardware.gflops,
        memory_gb: args.hardware.memory_gb,
        bandwidth_gbps: args.hardware.bandwidth_gbps,
        region: args.hardware.region,
        endpoint: args.endpoint,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::endpoint_ok;

    #[test]
    fn endpoints_are_short_printable_http_urls() {
        assert!(endpoint_ok(b""));
        assert!(endpoint_ok(b"http://10.0.0.7:8899"));
        assert!(endpoint_ok(b"https://gpu-3.example.com"));
        assert!(!endpoint_ok(b"ftp://x.example.com"));
        assert!(!endpoint_ok(b"https://"));
        assert!(endpoint_ok(b"http://a"));
        assert!(!endpoint_ok(b"http:///path"));
        for bad in [
            &b"https://victim.example/api?x="[..],
            b"https://host.example#",
            b"https://user@host.example",
            b"https://host.example\\x",
        ] {
            assert!(!endpoint_ok(bad), "{}", String::from_utf8_lossy(bad));
        }
        assert!(!endpoint_ok(b"https://a b.example"));
        assert!(!endpoint_ok("https://é.example".as_bytes()));
        let long = format!("https://{}", "a".repeat(super::MAX_ENDPOINT_LEN));
        assert!(!endpoint_ok(long.as_bytes()));
    }
}
