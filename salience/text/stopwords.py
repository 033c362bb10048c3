"""Stop-word lists.

Any language of :mod:`salience.text.languages` with a stop list is named by its ISO 639-1 code
or English name (``"fr"``, ``"german"``). ``"en"`` is the classic English stop set of Lucene / Elasticsearch's ``_english_`` analyzer
(33 words), the list most BM25 baselines (Pyserini, bm25s) use, so results are comparable.
``"en_full"`` is a fuller function-word list (summaries, language detection); ``"en_keyphrase"``
adds the SMART list's vague words to it, for keyphrase candidates.
"""

from __future__ import annotations

__all__ = ["STOPWORDS"]

_ENGLISH = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their
    then there these they this to was will with""".split()
)

# A fuller English function-word list (pronouns, determiners, auxiliaries, prepositions,
# conjunctions, frequent adverbs) for salience of content words: keyphrases and summaries.
_ENGLISH_FULL = _ENGLISH | frozenset(
    """i me my myself we us our ours ourselves you your yours yourself yourselves he him his himself she her hers
    herself its itself them theirs themselves what which who whom whose this that these those am is are was were
    be been being have has had having do does did doing would should could ought might must shall can may will
    a an the and but if or because as until while of at by for with about against between into through during
    before after above below to from up down in out on off over under again further then once here there when
    where why how all any both each few more most other some such no nor not only own same so than too very
    just also now even still yet ever never always often however although though whether either neither
    upon within without across along among around behind beyond toward towards via per onto
    s t don doesn didn isn aren wasn weren hasn haven hadn won wouldn shouldn couldn mustn ll re ve d m
    one ones many much every another anything something nothing everything someone anyone everyone""".split()
)

# The SMART retrieval system's English stop list (Salton, 1971), in the 580-word form that sumy
# ships and stopwordsiso's English list contains: beside the function words it holds
# the vague words that open or pad a noun phrase ("novel", "various", "several", "using",
# "based"), which keyphrase candidates must not start with or contain.
_SMART = frozenset(
    """
    a a's able about above according accordingly across actually after afterwards again against ain't all allow
    allows almost alone along already also although always am among amongst an and another any anybody anyhow
    anyone anything anyway anyways anywhere apart appear appreciate appropriate are aren't around as aside ask
    asking associated at available away awfully b be became because become becomes becoming been before beforehand
    behind being believe below beside besides best better between beyond both brief but by c c'mon c's came can
    can't cannot cant cause causes certain certainly changes clearly co com come comes concerning consequently
    consider considering contain containing contains corresponding could couldn't course currently d definitely
    described despite did didn't different do does doesn't doing don't done down downwards during e each edu eg
    eight either else elsewhere enough entirely especially et etc even ever every everybody everyone everything
    everywhere ex exactly example except f far few fifth first five followed following follows for former formerly
    forth four from further furthermore g get gets getting given gives go goes going gone got gotten greetings h
    had hadn't happens hardly has hasn't have haven't having he he'd he'll he's hello help hence her here here's
    hereafter hereby herein hereupon hers herself hi him himself his hither hopefully how how's howbeit however i
    i'd i'll i'm i've ie if ignored immediate in inasmuch inc indeed indicate indicated indicates inner insofar
    instead into inward is isn't it it'd it'll it's its itself j just k keep keeps kept know known knows l last
    lately later latter latterly least less lest let let's like liked likely little look looking looks ltd m
    mainly many may maybe me mean meanwhile merely might more moreover most mostly much must mustn't my myself n
    name namely nd near nearly necessary need needs neither never nevertheless new next nine no nobody non none
    noone nor normally not nothing novel now nowhere o obviously of off often oh ok okay old on once one ones only
    onto or other others otherwise ought our ours ourselves out outside over overall own p particular particularly
    per perhaps placed please plus possible presumably probably provides q que quite qv r rather rd re really
    reasonably regarding regardless regards relatively respectively right s said same saw say saying says second
    secondly see seeing seem seemed seeming seems seen self selves sensible sent serious seriously seven several
    shall shan't she she'd she'll she's should shouldn't since six so some somebody somehow someone something
    sometime sometimes somewhat somewhere soon sorry specified specify specifying still sub such sup sure t t's
    take taken tell tends th than thank thanks thanx that that's thats the their theirs them themselves then
    thence there there's thereafter thereby therefore therein theres thereupon these they they'd they'll they're
    they've think third this thorough thoroughly those though three through throughout thru thus to together too
    took toward towards tried tries truly try trying twice two u un under unfortunately unless unlikely until unto
    up upon us use used useful uses using usually uucp v value various very via viz vs w want wants was wasn't way
    we we'd we'll we're we've welcome well went were weren't what what's whatever when when's whence whenever
    where where's whereafter whereas whereby wherein whereupon wherever whether which while whither who who's
    whoever whole whom whose why why's will willing wish with within without won't wonder would wouldn't x y yes
    yet you you'd you'll you're you've your yours yourself yourselves z zero
    """.split()
)

STOPWORDS: dict[str, frozenset[str]] = {
    "en": _ENGLISH,
    "english": _ENGLISH,
    "en_full": _ENGLISH_FULL,
    # keyphrase candidates in English: the fuller list and SMART's (chosen on the keyphrase
    # sets' dev splits over en_full alone)
    "en_keyphrase": _ENGLISH_FULL | _SMART,
}
