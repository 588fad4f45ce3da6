// Reads a JSON list of PromQL expressions on stdin; prints, for each, the metric names it selects or its parse error.
package main

import (
	"encoding/json"
	"os"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type result struct {
	Expr    string   `json:"expr"`
	Error   string   `json:"error,omitempty"`
	Metrics []string `json:"metrics"`
}

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		panic(err)
	}
	out := []result{}
	for _, e := range exprs {
		r := result{Expr: e, Metrics: []string{}}
		node, err := parser.NewParser(parser.Options{}).ParseExpr(e)
		if err != nil {
			r.Error = err.Error()
		} else {
			parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					name := vs.Name
					for _, m := range vs.LabelMatchers {
						if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
							name = m.Value
						}
					}
					r.Metrics = append(r.Metrics, name)
				}
				return nil
			})
		}
		out = append(out, r)
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
