// Command genchain writes a large valid evidence chain for benchmarks and
// prints its head: genchain -o FILE -mb 100.
package main

import (
	"flag"
	"fmt"
	"os"

	"polc.dev/polc/internal/evidencegen"
)

func main() {
	out := flag.String("o", "chain.jsonl", "output file")
	mb := flag.Int64("mb", 100, "minimum size in MB (10^6 bytes)")
	flag.Parse()
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	head, n, err := evidencegen.WriteLargeChain(f, *mb*1000*1000, "bench")
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("%s %d\n", head, n)
}
