"""What the dashboard and exports show, as plain data and escaped HTML: browsing, maps, word clouds, pins, reports, HTML export."""
