package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// tableCells counts a Markdown table row's cells as GitHub does: split on
// every unescaped |, code spans included.
func tableCells(row string) int {
	row = strings.ReplaceAll(row, `\|`, "")
	return len(strings.Split(strings.Trim(strings.TrimSpace(row), "|"), "|"))
}

var delimiterRow = regexp.MustCompile(`^\|(\s*:?-+:?\s*\|)+\s*$`)

// TestChartDocTablesEnd: every table in the chart's documents is rows of
// its header's width up to a blank line. GitHub takes any line after a
// table's last row, until a blank line, as one more row, and drops cells
// beyond the header's: a paragraph run on from a table is lost in it.
func TestChartDocTablesEnd(t *testing.T) {
	docs := []string{filepath.Join(deployments(t), "..", "docs", "platforms.md"), filepath.Join(chartDir(t), "README.md")}
	for _, doc := range docs {
		data, err := os.ReadFile(doc) // #nosec G304 -- the project's documents
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		tables := 0
		for i := 1; i < len(lines); i++ {
			if !delimiterRow.MatchString(lines[i]) {
				continue
			}
			tables++
			width := tableCells(lines[i-1])
			for j := i + 1; j < len(lines) && strings.TrimSpace(lines[j]) != ""; j++ {
				row := strings.TrimSpace(lines[j])
				if !strings.HasPrefix(row, "|") || !strings.HasSuffix(row, "|") || tableCells(row) != width {
					t.Errorf("%s:%d: not a row of the %d-column table above (end the table with a blank line):\n%s",
						filepath.Base(doc), j+1, width, lines[j])
				}
			}
		}
		if tables == 0 {
			t.Errorf("%s: no table found", doc)
		}
	}
}
