// Package statuspage holds the HTML, CSS and script of the status page
// etl.StatusPage serves: one self-contained document that loads nothing
// else and renders the JSON document of status.json, kept current through
// Server-Sent Events.
package statuspage

import (
	_ "embed"
	"strings"
)

var (
	//go:embed page.html
	page string
	// Script is the page's one script, as it stands between its <script>
	// tags (the Content-Security-Policy allows it by hash).
	//
	//go:embed page.js
	Script string
	// HTML is the whole page.
	HTML = strings.Replace(page, "<script></script>", "<script>"+Script+"</script>", 1)
)
