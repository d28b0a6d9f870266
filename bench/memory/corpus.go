package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// The corpus: facts about people of one user's life and work, made from a few
// hundred words, each with a reference code of its own (so no two memories are
// exact duplicates, and a query by code has one answer among near-duplicates).
var (
	firstNames = strings.Fields("Alice Bjorn Carla Dmitri Elin Farid Greta Hiro Ingrid Jonas Kari Lars Maren Nils Olga Per Quinn Rosa Sven Tove Ulla Vidar Wenche Xavier Yrsa Zainab Amir Berit Chen Dagny")
	lastNames  = strings.Fields("Berg Dahl Eriksen Fossum Hauge Iversen Johansen Karlsen Lund Moen Nilsen Olsen Pedersen Quist Rud Solberg Strand Tangen Vik Aas Bakke Holm Lie Myhre Nygaard Ruud Sandvik Tveit Udal Wold")
	objects    = strings.Fields("invoice contract laptop bicycle passport ticket report budget roadmap prototype camera kayak piano tent heater printer drone sofa fridge scooter ladder guitar microscope telescope backpack lantern kettle router monitor keyboard")
	adjectives = strings.Fields("blue second-hand quarterly urgent refurbished signed draft annual broken spare heavy lightweight vintage wireless portable waterproof")
	places     = strings.Fields("Oslo Bergen Trondheim Tromso Stavanger Lyon Seville Berlin Lisbon Krakow Tallinn Reykjavik Uppsala Aarhus Gdansk Porto Ghent Bologna Zagreb Riga")
	verbs      = strings.Fields("ordered returned borrowed repaired sold shipped reviewed signed lost found")
	weekdays   = strings.Fields("Monday Tuesday Wednesday Thursday Friday Saturday Sunday")
	topics     = strings.Fields("billing deployment hiring security onboarding pricing migration backups licensing travel")
)

// ref is memory i's reference code, e.g. "QX7R2T".
func ref(i int) string {
	s := strings.ToUpper(strconv.FormatInt(int64(i)*7919+104729, 36))
	return "R" + s
}

func person(r *rand.Rand) string {
	return firstNames[r.IntN(len(firstNames))] + " " + lastNames[r.IntN(len(lastNames))]
}

func pick(r *rand.Rand, words []string) string { return words[r.IntN(len(words))] }

// memoryText is memory i of the corpus (the same for the same i in every run).
func memoryText(i int) string {
	r := rand.New(rand.NewPCG(uint64(i), 0x6d656d))
	switch i % 5 {
	case 0:
		return fmt.Sprintf("%s %s the %s %s in %s on %s, reference %s.", person(r), pick(r, verbs), pick(r, adjectives), pick(r, objects), pick(r, places), pick(r, weekdays), ref(i))
	case 1:
		return fmt.Sprintf("%s prefers the %s %s when travelling to %s (booking %s).", person(r), pick(r, adjectives), pick(r, objects), pick(r, places), ref(i))
	case 2:
		return fmt.Sprintf("The %s meeting with %s moved to %s in %s; ticket %s.", pick(r, topics), person(r), pick(r, weekdays), pick(r, places), ref(i))
	case 3:
		return fmt.Sprintf("%s owes %s %d kroner for the %s %s, invoice %s.", person(r), person(r), 100+r.IntN(9900), pick(r, adjectives), pick(r, objects), ref(i))
	default:
		return fmt.Sprintf("%s leads the %s work in %s and reports to %s, case %s.", person(r), pick(r, topics), pick(r, places), person(r), ref(i))
	}
}

// queryText is query j against a corpus of n memories: a third by reference code,
// a third by a person and a thing, a third as a question in other words.
func queryText(j, n int) string {
	r := rand.New(rand.NewPCG(uint64(j), 0x717279))
	switch j % 3 {
	case 0:
		code, _ := queryRef(j, n)
		return "what is " + code + " about?"
	case 1:
		return fmt.Sprintf("what did %s do with the %s in %s", person(r), pick(r, objects), pick(r, places))
	default:
		return fmt.Sprintf("who is in charge of %s in %s and who do they answer to", pick(r, topics), pick(r, places))
	}
}

// queryRef is the reference code query j asks about, if it asks by code.
func queryRef(j, n int) (string, bool) {
	if j%3 != 0 {
		return "", false
	}
	r := rand.New(rand.NewPCG(uint64(j), 0x726566))
	return ref(r.IntN(n)), true
}
