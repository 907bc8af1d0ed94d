"""A/B speed reports: variants, statistics, report.json/.md/.html (docs/architecture.md, docs/bench.md)."""
