//! The demo's report as text tables.

use super::{DemoReport, SLOT_SECONDS};

/// The report as text tables.
pub fn render(r: &DemoReport) -> String {
    let mut s = format!(
        "{:>3} {:<28} {:>9} {:<20} {:<10} {:>4} {:>6} {:>11} {:>11}  {}\n",
        "id",
        "job",
        "reward",
        "provider",
        "outcome",
        "esc",
        "v/i",
        "paid",
        "slashed",
        "slots claim/submit/final/close"
    );
    for t in &r.tasks {
        s += &format!(
            "{:>3} {:<28} {:>9} {:<20} {:<10} {:>4} {:>6} {:>11} {:>11}  {}/{}/{}/{}\n",
            t.id,
            t.job,
            t.reward,
            t.provider,
            t.outcome,
            if t.escalated { "yes" } else { "" },
            t.votes,
            t.provider_paid,
            t.provider_slashed,
            t.slots[0],
            t.slots[1],
            t.slots[2],
            t.slots[3]
        );
    }
    s += &format!(
        "\n{:<24} {:<34} {:>12} {:>12} {:>8} {:>6} {:>14}\n",
        "node", "role", "earned", "slashed", "slashes", "work", "sided w/ loser"
    );
    for n in &r.nodes {
        s += &format!(
            "{:<24} {:<34} {:>12} {:>12} {:>8} {:>6} {:>14}\n",
            n.name, n.role, n.earned, n.slashed, n.times_slashed, n.work, n.sided_with_loser
        );
    }
    let m = &r.model;
    s += &format!(
        "\nverification / compute: {:.4} overall ({})\nslots run: {}; fees swept to the treasury: {}\n\
         performance model P = N·G·E/(1+L/C) with N = {}, G = {:.3e} work/s, E = {:.2}, L = {:.1} s, C = {:.3} s  =>  P = {:.3e} work/s\n\
         measured throughput (accepted work / (slots × {SLOT_SECONDS} s)): {:.3e} work/s\n",
        r.verification_over_compute,
        r.verification_over_compute_by_kind.iter().map(|(k, v)| format!("{k} {v:.4}")).collect::<Vec<_>>().join(", "),
        r.slots,
        r.treasury,
        m.n, m.g, m.e, m.l, m.c, m.p, m.measured
    );
    if let Some(d) = &r.digits {
        s += &match d.accuracy {
            Some(a) => format!(
                "digits (an Mlp task on the client's data, {} held-out rows): {}, the market's verified result classifies {:.2}% right (the float model {})\n",
                d.rows,
                d.outcome,
                100.0 * a,
                d.float_accuracy.map_or("-".into(), |f| format!("{:.2}%", 100.0 * f))
            ),
            None => format!(
                "digits (an Mlp task on the client's data, {} held-out rows): {}, no verified classification\n",
                d.rows, d.outcome
            ),
        };
    }
    if let Some(g) = &r.generate {
        s += &format!(
            "generation (a Generate task: SmolLM2-135M-Instruct, integer and bit-exact, {} prompts): {}{}\n",
            g.completions.len().max(2),
            g.outcome,
            if g.completions.is_empty() { ", no verified completions" } else { ", the verified completions:" }
        );
        for c in &g.completions {
            s += &format!("  > {}\n    {}\n", c.prompt, c.text.replace('\n', "\n    "));
        }
    }
    if let Some(d) = &r.sentences {
        s += &match d.cosine {
            Some((mean, min)) => format!(
                "sentences (an Encoder task on the client's data, MiniLM over {} held-out texts): {}, the market's verified embeddings have cosine {mean:.4} mean, {min:.4} least to the fp32 model's; by kind of text:\n{}",
                d.texts,
                d.outcome,
                d.by_kind
                    .iter()
                    .map(|k| format!(
                        "  {:13} {:4} texts  mean {:.4}  least {:.4}\n",
                        k.kind, k.texts, k.mean, k.least
                    ))
                    .collect::<String>()
            ),
            None => format!(
                "sentences (an Encoder task on the client's data, {} held-out texts): {}, no verified embeddings\n",
                d.texts, d.outcome
            ),
        };
    }
    s
}
