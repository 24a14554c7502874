"""TextWorld games as environments: the game wrapper (`env`), the facts of its states (`facts`), scripted agents
(`agents`), and seeded families of small games for learning experiments (`family`)."""
