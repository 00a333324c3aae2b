"""The tiny parallel corpus both sides of the seq2seq_translation example train on (French ->
English, in the tutorial's normalized form: lower case, punctuation split off), in place of the
tutorial's download. Every sentence has at most 9 words, so with its EOS it fits MAX_LENGTH 10."""

PAIRS = [
    ("je suis grand .", "i am tall ."),
    ("je suis fatigue .", "i am tired ."),
    ("il est grand .", "he is tall ."),
    ("il est fatigue .", "he is tired ."),
    ("elle est heureuse .", "she is happy ."),
    ("nous sommes heureux .", "we are happy ."),
    ("vous etes en retard .", "you are late ."),
    ("je ne suis pas en retard .", "i am not late ."),
    ("il n est pas heureux .", "he is not happy ."),
    ("elle est plus grande que moi .", "she is taller than me ."),
    ("nous sommes tres fatigues .", "we are very tired ."),
    ("tu es mon ami .", "you are my friend ."),
    ("je suis ton ami .", "i am your friend ."),
    ("il est en train de lire .", "he is reading ."),
    ("elle est en train de manger .", "she is eating ."),
    ("nous sommes en train de parler .", "we are talking ."),
]
