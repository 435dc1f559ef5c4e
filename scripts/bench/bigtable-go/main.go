// Writes N rows of 5 columns into a Bigtable table through Google's Go client, for
// Outflow's benchmark (scripts/bench/bigtable.sh). The data matches the Outflow and Python
// writers: row keys user%08d, family cf, columns c0..c4 holding "v<col>-<row %012d>", all
// at one explicit timestamp. Talks to the emulator named by BIGTABLE_EMULATOR_HOST.
//
// Prints one JSON line: {"writer":"go","rows":N,"seconds":S}.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
)

func main() {
	project := flag.String("project", "bench", "project")
	instance := flag.String("instance", "bench", "instance")
	table := flag.String("table", "", "table (must exist, with family cf)")
	rows := flag.Int("rows", 1_000_000, "rows to write")
	batch := flag.Int("batch", 10_000, "rows per ApplyBulk call")
	workers := flag.Int("workers", 4, "ApplyBulk calls in flight")
	flag.Parse()
	if *table == "" || os.Getenv("BIGTABLE_EMULATOR_HOST") == "" {
		log.Fatal("need -table and BIGTABLE_EMULATOR_HOST")
	}
	ctx := context.Background()
	client, err := bigtable.NewClient(ctx, *project, *instance)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	tbl := client.Open(*table)
	ts := bigtable.Timestamp(1_700_000_000_000_000)

	start := time.Now()
	jobs := make(chan int)
	var wg sync.WaitGroup
	var failed sync.Once
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := range jobs {
				last := min(first+*batch, *rows)
				keys := make([]string, 0, last-first)
				muts := make([]*bigtable.Mutation, 0, last-first)
				for i := first; i < last; i++ {
					m := bigtable.NewMutation()
					for c := 0; c < 5; c++ {
						m.Set("cf", fmt.Sprintf("c%d", c), ts, []byte(fmt.Sprintf("v%d-%012d", c, i)))
					}
					keys = append(keys, fmt.Sprintf("user%08d", i))
					muts = append(muts, m)
				}
				errs, err := tbl.ApplyBulk(ctx, keys, muts)
				if err != nil || errs != nil {
					failed.Do(func() { log.Fatalf("ApplyBulk failed: %v %v", err, errs) })
				}
			}
		}()
	}
	for first := 0; first < *rows; first += *batch {
		jobs <- first
	}
	close(jobs)
	wg.Wait()
	fmt.Printf("{\"writer\":\"go\",\"rows\":%d,\"seconds\":%.3f}\n", *rows, time.Since(start).Seconds())
}
