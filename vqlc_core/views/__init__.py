"""What the dashboard and exports show, as plain data and escaped HTML: browsing, the concept grid's filter and sort, a view's link, maps, word clouds, pins, reports, HTML export."""
