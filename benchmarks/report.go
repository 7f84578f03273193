package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The report: every table the benchmarks print is also kept for -json,
// and figures are drawn as PNG files with gonum/plot.

// cell is one table cell: the text printed, and the number behind it
// (for JSON) when there is one.
type cell struct {
	Text  string
	Value *float64
}

// num is a numeric cell printed with format (for example "%.2f%%"), or
// humanized when format is empty.
func num(v float64, format string) cell {
	text := humanize(v)
	if format != "" {
		text = fmt.Sprintf(format, v)
	}
	return cell{Text: text, Value: &v}
}

// Table is one markdown table of the report.
type Table struct {
	Section string   `json:"section"`
	Title   string   `json:"title"`
	Note    string   `json:"note,omitempty"`
	Columns []string `json:"columns"`
	rows    [][]cell
	// Rows are the rows as column → number (or text), for JSON.
	Rows []map[string]any `json:"rows"`
}

var tables []*Table

// newTable starts a table of a section (the -sections name).
func newTable(section, title, note string, columns ...string) *Table {
	t := &Table{Section: section, Title: title, Note: note, Columns: columns}
	tables = append(tables, t)
	return t
}

// Row adds a row: each value is a cell, a string, or a number (humanized).
func (t *Table) Row(values ...any) {
	row := make([]cell, len(values))
	obj := map[string]any{}
	for i, v := range values {
		switch x := v.(type) {
		case cell:
			row[i] = x
		case string:
			row[i] = cell{Text: x}
		case int:
			row[i] = num(float64(x), "")
		case int64:
			row[i] = num(float64(x), "")
		case uint64:
			row[i] = num(float64(x), "")
		case float64:
			row[i] = num(x, "")
		default:
			row[i] = cell{Text: fmt.Sprint(x)}
		}
		if i < len(t.Columns) {
			if row[i].Value != nil {
				obj[t.Columns[i]] = *row[i].Value
			} else {
				obj[t.Columns[i]] = row[i].Text
			}
		}
	}
	t.rows = append(t.rows, row)
	t.Rows = append(t.Rows, obj)
}

// Print writes the table as markdown: a heading, the note, the table.
func (t *Table) Print() {
	fmt.Printf("\n## %s\n\n", t.Title)
	if t.Note != "" {
		fmt.Printf("%s\n\n", t.Note)
	}
	fmt.Printf("| %s |\n", strings.Join(t.Columns, " | "))
	seps := make([]string, len(t.Columns))
	for i := range seps {
		seps[i] = "---"
		if i > 0 {
			seps[i] = "---:"
		}
	}
	fmt.Printf("| %s |\n", strings.Join(seps, " | "))
	for _, r := range t.rows {
		texts := make([]string, len(r))
		for i, c := range r {
			texts[i] = c.Text
		}
		fmt.Printf("| %s |\n", strings.Join(texts, " | "))
	}
}

// series is one line of a figure.
type series struct {
	Name string
	X, Y []float64
}

// plotsDir is where figures go; empty draws none.
var plotsDir string

// figure draws series as lines with points into plotsDir/name.png and
// prints the markdown that shows it.
func figure(name, title, xLabel, yLabel string, ss ...series) {
	if plotsDir == "" {
		return
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	for i, s := range ss {
		pts := make(plotter.XYs, len(s.X))
		for k := range s.X {
			pts[k].X, pts[k].Y = s.X[k], s.Y[k]
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			fmt.Fprintf(os.Stderr, "figure %s: %v\n", name, err)
			return
		}
		c := plotutil.Color(i)
		line.Color, points.Color = c, c
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
	}
	p.Legend.Top, p.Legend.Left = false, true
	p.Legend.TextStyle.Color = color.Black
	if err := os.MkdirAll(plotsDir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "figure %s: %v\n", name, err)
		return
	}
	file := filepath.Join(plotsDir, name+".png")
	if err := p.Save(7*vg.Inch, 4*vg.Inch, file); err != nil {
		fmt.Fprintf(os.Stderr, "figure %s: %v\n", name, err)
		return
	}
	fmt.Printf("\n![%s](%s)\n", title, file)
}

// writeJSON writes every table with the machine and the date.
func writeJSON(file string, machine map[string]any) error {
	data, err := json.MarshalIndent(map[string]any{"machine": machine, "tables": tables}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}
