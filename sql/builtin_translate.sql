-- PostgreSQL's own translate(text, text, text) keeps working with the
-- extension installed and attention first on search_path.
SET search_path = attention, public, pg_catalog;
SELECT translate('12345', '143', 'ax');
SELECT translate('attention', 'tn', 'TN');
SELECT pg_catalog.translate('abc', 'b', '');
SELECT count(*) AS attention_functions_named_translate_with_3_text_args
  FROM pg_proc
 WHERE proname = 'translate' AND pronamespace = 'attention'::regnamespace
   AND proargtypes = '25 25 25'::oidvector;
RESET search_path;
