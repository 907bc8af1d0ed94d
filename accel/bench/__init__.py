"""A/B speed reports: variants, statistics, report.json/.md/.html (DESIGN.md section 6)."""
