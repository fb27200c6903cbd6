// Command lincheck checks a key-value history for linearizability with porcupine
// (github.com/anishathalye/porcupine), one partition per key.
//
// Input (stdin or the file named by -in): JSON lines, one operation each:
//
//	{"client": 0, "op": "write", "key": "k1", "value": "v7", "call": 1000, "return": 2500}
//	{"client": 1, "op": "read",  "key": "k1", "value": "v7", "call": 1200, "return": 1900}
//	{"client": 1, "op": "read",  "key": "k2", "value": null, "call": 3000, "return": 3100}
//
// op is "read" or "write"; value is the value written, or the value a read returned (null: the
// key held no value, its initial state); call and return are integer timestamps on one clock
// (e.g. nanoseconds). A pending operation (no answer: its client timed out or stopped) has
// "return": null: a pending write may have taken effect at any time after its call (its return
// is taken as +infinity), a pending read constrains nothing and is left out (counted).
//
// Output (stdout): one JSON object:
//
//	{"ok": true, "result": "Ok", "operations": 812, "pending_writes": 3, "pending_reads": 1,
//	 "partitions": 40, "violations": 0, "unknown": 0, "bad_keys": [], "key": null}
//
// "violations" counts the keys whose operations are not linearizable, "unknown" the keys whose
// check ran out of time (-timeout); "key" is the first bad key (sorted), "bad_keys" up to 20 of
// them. ok is true only when every key is linearizable. With -html FILE porcupine's
// visualization of the first bad key (or of the whole history when none) is written there.
// Exit status 0 on ok, 1 on a violation or timeout, 2 on bad input.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// record is one input line.
type record struct {
	Client int     `json:"client"`
	Op     string  `json:"op"`
	Key    *string `json:"key"`
	Value  *string `json:"value"`
	Call   *int64  `json:"call"`
	Return *int64  `json:"return"`
}

// cell is a key's state: its value, or absent (the initial state).
type cell struct {
	present bool
	value   string
}

type input struct {
	write bool
	key   string
	value cell // the value written
}

type output struct {
	value cell // the value read (unused for writes)
}

func (c cell) String() string {
	if !c.present {
		return "<none>"
	}
	return fmt.Sprintf("%q", c.value)
}

// register is the sequential specification of one key (the history is split by key first).
var register = porcupine.Model{
	Init: func() interface{} { return cell{} },
	Step: func(state, in, out interface{}) (bool, interface{}) {
		st := state.(cell)
		op := in.(input)
		if op.write {
			return true, op.value
		}
		return out.(output).value == st, st
	},
	Equal: func(a, b interface{}) bool { return a.(cell) == b.(cell) },
	Hash: func(state interface{}) uint64 {
		st := state.(cell)
		h := fnv.New64a()
		if st.present {
			h.Write([]byte{1})
			h.Write([]byte(st.value))
		}
		return h.Sum64()
	},
	DescribeOperation: func(in, out interface{}) string {
		op := in.(input)
		if op.write {
			return fmt.Sprintf("write(%q, %v)", op.key, op.value)
		}
		return fmt.Sprintf("read(%q) -> %v", op.key, out.(output).value)
	},
	DescribeState: func(state interface{}) string { return state.(cell).String() },
}

type report struct {
	Ok            bool     `json:"ok"`
	Result        string   `json:"result"`
	Operations    int      `json:"operations"`
	PendingWrites int      `json:"pending_writes"`
	PendingReads  int      `json:"pending_reads"`
	Partitions    int      `json:"partitions"`
	Violations    int      `json:"violations"`
	Unknown       int      `json:"unknown"`
	BadKeys       []string `json:"bad_keys"`
	Key           *string  `json:"key"`
	Seconds       float64  `json:"seconds"`
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "lincheck: "+format+"\n", args...)
	os.Exit(2)
}

// readHistory parses the JSON lines into per-key operation lists.
func readHistory(r io.Reader, rep *report) map[string][]porcupine.Operation {
	byKey := make(map[string][]porcupine.Operation)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	line := 0
	for sc.Scan() {
		line++
		raw := sc.Bytes()
		if len(raw) == 0 {
			continue
		}
		var rec record
		if err := json.Unmarshal(raw, &rec); err != nil {
			fail("line %d: %v", line, err)
		}
		if rec.Key == nil || rec.Call == nil {
			fail("line %d: an operation needs \"key\" and \"call\"", line)
		}
		var in input
		switch rec.Op {
		case "write":
			if rec.Value == nil {
				fail("line %d: a write needs a \"value\"", line)
			}
			in = input{write: true, key: *rec.Key, value: cell{true, *rec.Value}}
		case "read":
			in = input{key: *rec.Key}
		default:
			fail("line %d: op %q is neither \"read\" nor \"write\"", line, rec.Op)
		}
		ret := int64(math.MaxInt64)
		if rec.Return == nil {
			if !in.write {
				rep.PendingReads++ // no answer: constrains nothing
				continue
			}
			rep.PendingWrites++
		} else {
			ret = *rec.Return
			if ret < *rec.Call {
				fail("line %d: return %d before call %d", line, ret, *rec.Call)
			}
		}
		var out output
		if !in.write && rec.Value != nil {
			out.value = cell{true, *rec.Value}
		}
		byKey[*rec.Key] = append(byKey[*rec.Key], porcupine.Operation{
			ClientId: rec.Client, Input: in, Output: out, Call: *rec.Call, Return: ret,
		})
		rep.Operations++
	}
	if err := sc.Err(); err != nil {
		fail("reading the history: %v", err)
	}
	return byKey
}

func main() {
	inPath := flag.String("in", "-", "history file (JSON lines), - for stdin")
	timeout := flag.Float64("timeout", 60, "seconds for the whole check (0: no limit)")
	htmlPath := flag.String("html", "", "write porcupine's visualization here")
	flag.Parse()

	var r io.Reader = os.Stdin
	if *inPath != "-" {
		f, err := os.Open(*inPath)
		if err != nil {
			fail("%v", err)
		}
		defer f.Close()
		r = f
	}
	rep := report{BadKeys: []string{}}
	start := time.Now()
	byKey := readHistory(r, &rep)
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rep.Partitions = len(keys)

	deadline := time.Duration(*timeout * float64(time.Second))
	var visualize []porcupine.Operation
	for _, k := range keys {
		limit := time.Duration(0)
		if deadline > 0 {
			limit = deadline - time.Since(start)
			if limit <= 0 {
				limit = time.Nanosecond
			}
		}
		res := porcupine.CheckOperationsTimeout(register, byKey[k], limit)
		switch res {
		case porcupine.Ok:
		case porcupine.Illegal:
			rep.Violations++
			if len(rep.BadKeys) < 20 {
				rep.BadKeys = append(rep.BadKeys, k)
			}
			if rep.Key == nil {
				key := k
				rep.Key = &key
				visualize = byKey[k]
			}
		default:
			rep.Unknown++
		}
	}
	rep.Ok = rep.Violations == 0 && rep.Unknown == 0
	switch {
	case rep.Violations > 0:
		rep.Result = "Illegal"
	case rep.Unknown > 0:
		rep.Result = "Unknown"
	default:
		rep.Result = "Ok"
	}
	if *htmlPath != "" {
		if visualize == nil {
			for _, k := range keys {
				visualize = append(visualize, byKey[k]...)
			}
		}
		_, info := porcupine.CheckOperationsVerbose(register, visualize, 10*time.Second)
		if err := porcupine.VisualizePath(register, info, *htmlPath); err != nil {
			fmt.Fprintf(os.Stderr, "lincheck: visualization: %v\n", err)
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(rep); err != nil {
		fail("%v", err)
	}
	if !rep.Ok {
		os.Exit(1)
	}
}
