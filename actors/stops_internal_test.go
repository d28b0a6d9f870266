package actors

import "testing"

func TestCallHashIsOfTheJSONValue(t *testing.T) {
	same := [][2]string{
		{`{"a":1,"b":[1,"x"]}`, ` { "b" : [ 1.0 , "x" ] , "a" : 1e0 } `},
		{`{"s":"A\n\u00e9"}`, `{"s":"\u0041\u000a` + "é" + `"}`},
		{`{"emoji":"\ud83d\ude00"}`, `{"emoji":"😀"}`},
		{`[true,false,null]`, "[true, false,\nnull]"},
		{`{"n":0}`, `{"n":-0}`},
		{`not json {`, `not json {`},
	}
	for _, p := range same {
		if callHash("t", p[0]) != callHash("t", p[1]) {
			t.Errorf("%s and %s hash apart", p[0], p[1])
		}
	}
	differ := [][2]string{
		{`{"a":1}`, `{"a":2}`},
		{`{"a":1,"b":2}`, `{"a":2,"b":1}`},
		{`{"a":[1,2]}`, `{"a":[2,1]}`},
		{`{"a":"1"}`, `{"a":1}`},
		{`{"a":{"b":1}}`, `{"a":{"c":1}}`},
		{`{"a":1}`, `{"a":1}x`},
		{`not json {`, `not  json {`},
		{`[]`, `{}`},
		{`""`, `null`},
	}
	for _, p := range differ {
		if callHash("t", p[0]) == callHash("t", p[1]) {
			t.Errorf("%s and %s hash alike", p[0], p[1])
		}
	}
	if callHash("a", `{}`) == callHash("b", `{}`) || callHash("ab", "c") == callHash("a", "bc") {
		t.Error("the tool's name does not count")
	}
	deep := ""
	for range maxJSONDepth + 10 {
		deep += "["
	}
	if callHash("t", deep) == callHash("t", deep+"[") {
		t.Error("deep arguments hash alike")
	}
}

func TestCallHashAllocatesNothing(t *testing.T) {
	args := `{"expression": "12 * (7 + 5)", "opts": {"precise": true, "digits": [1, 2.5e3]}, "s": "\u00e9\n"}`
	if n := testing.AllocsPerRun(100, func() { callHash("calculator", args) }); n != 0 {
		t.Errorf("callHash allocates %.0f times a call", n)
	}
}
