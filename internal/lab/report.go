package lab

import (
	"fmt"
	"html/template"
)

// reportBase are the pieces every lab report shares: {{template "head" .}} opens the
// page (its title from .Title and .Env's time; .Wide for tables with many columns) and
// {{template "env" .Env}} says on what machine, which build, and whether the run was a
// quick one (a harness check, not a measurement). "f" formats a number.
const reportBase = `{{define "head"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} — {{.Env.Time.Format "2006-01-02 15:04"}}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:{{if .Wide}}75rem{{else}}60rem{{end}};margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}.note{color:#555;font-size:.9rem}
svg text{font-size:12px}
</style></head><body>{{end}}
{{define "env"}}{{.CPU}}, {{.Cores}} cores, Linux {{.Kernel}}, {{.Go}}, commit {{.Commit}}{{if .Quick}}, <b>quick run</b>: harness check, not a measurement{{end}}{{end}}`

// NewReport parses a lab report's template: body uses the shared pieces above and
// funcs, if the report needs more than "f".
func NewReport(body string, funcs ...template.FuncMap) *template.Template {
	t := template.New("r").Funcs(template.FuncMap{"f": func(f string, v float64) string { return fmt.Sprintf(f, v) }})
	for _, fm := range funcs {
		t = t.Funcs(fm)
	}
	return template.Must(template.Must(t.Parse(reportBase)).Parse(body))
}

// Verdict is a target's word in a summary printed for people.
func Verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT met"
}
